package redlock

// The Redis names of a lock's keys on every node, and of the wake channels.

import (
	"strings"

	"github.com/distlock/distlock/redislock"
)

// DefaultPrefix is the prefix of every Redis key and channel a Backend
// uses on its nodes, unless set with WithPrefix. It differs from
// redislock's, so that the two backends never read each other's keys.
const DefaultPrefix = "redlock:"

// Suffixes of the Redis keys of one lock; see the key layout in the package
// documentation.
const (
	suffixLock    = ":lock"
	suffixToken   = ":token"
	suffixTomb    = ":released:"
	suffixQueue   = ":waiters"
	suffixWaiting = ":waiting"
	suffixWoken   = ":woken"
	// suffixHolder names the channel on which a node announces that the
	// key's grant on it changed (a grant, a release, a raised token).
	suffixHolder = ":holder"
	// suffixWatched names the key's watch marker: present while a Backend
	// watches the key's holder.
	suffixWatched = ":watched"
	// wakeName follows the prefix, then a Backend's id: the channel on
	// which releases wake that Backend's waiters.
	wakeName = "wake:"
	// markerName follows the prefix: the node's seed marker. It has no
	// brace, so it is never taken for a lock's key.
	markerName = "node:seed"
)

// lockKeys are the Redis names used by one lock, the same on every node.
type lockKeys struct {
	base  string // prefix + hash tag
	lock  string
	token string
	queue string // the waiters, in ticket order: a release wakes the first
	// waiting is set while queue may have members: releases read queue
	// only then.
	waiting string
	// woken keeps a node for the waiter a release woke, for a moment.
	woken string
	// watched is present while a Backend watches the key's holder.
	watched string
}

func (b *Backend) keysFor(key string) lockKeys {
	base := b.cfg.prefix + redislock.HashTag(key)
	return lockKeys{base: base, lock: base + suffixLock, token: base + suffixToken, queue: base + suffixQueue, waiting: base + suffixWaiting, woken: base + suffixWoken, watched: base + suffixWatched}
}

// KeyPath returns where key's lock lives on each node: the lock key,
// prefix + redislock.HashTag(key) + ":lock", the same on every node (see
// the key layout in the package documentation).
func (b *Backend) KeyPath(key string) string { return b.keysFor(key).lock }

// tomb returns the tombstone key of the grant with the given secret.
func (k lockKeys) tomb(secret string) string { return k.base + suffixTomb + secret }

var tagUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// decodeKey returns the user key of a Redis lock key (suffix suffixLock)
// or counter (suffixToken) under prefix.
func decodeKey(prefix, rkey, suffix string) (string, bool) {
	s, ok := strings.CutPrefix(rkey, prefix+"{")
	if !ok {
		return "", false
	}
	s, ok = strings.CutSuffix(s, "}"+suffix)
	if !ok || s == "" || strings.ContainsAny(s, "{}") {
		return "", false
	}
	return tagUnescaper.Replace(s), true
}

// globEscape escapes the glob characters of SCAN MATCH.
var globEscape = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)
