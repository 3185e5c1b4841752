package redlock

// The Redis names of a lock's keys on every node, and of the wake channels.

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/distlock/distlock/internal/redis/redact"
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

// credential is what identifies one try's grant on the nodes: its secret,
// the first field of the lock value it sets (and which refresh, raise and
// release check), and the name of its tombstone. A try makes it once;
// its lease keeps it. Scripts get the secret as &secret, a
// *redact.Secret: go-redis writes it as its bytes, and a hook that logs
// or traces commands (cmd.String, redisotel, or cmd.Args() encoded as
// JSON) shows "[secret]" instead. The tombstone is a key, which Node takes
// as a string: it is named by a digest of the secret (see tombOf).
type credential struct {
	secret redact.Secret
	tomb   string
}

// credential returns the credential of the try with secret on k's key.
// It keeps secret, which must not change afterwards.
func (k lockKeys) credential(secret []byte) *credential {
	return &credential{secret: redact.Bytes(secret), tomb: k.tombOf(secret)}
}

// secretLen is the length of a try's secret: 26 characters of base32,
// 130 random bits, as crypto/rand.Text makes them.
const secretLen = 26

// newSecret returns a new secret for a try, as crypto/rand.Text would
// make it, as bytes.
func newSecret() []byte {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567" // crypto/rand.Text's
	s := make([]byte, secretLen)
	_, _ = rand.Read(s) // never fails (crypto/rand.Read)
	for i := range s {
		s[i] = alphabet[s[i]%32] // 256 is a multiple of 32: uniform
	}
	return s
}

// tombDigest is how many bytes of the SHA-256 of a grant's secret name
// its tombstone: 128 bits, written as 32 hex digits.
const tombDigest = 16

// tombOf returns the tombstone key of the grant with the given secret:
// named by the first 128 bits of the secret's SHA-256, not by the secret,
// so that a hook that logs commands (the key is a script's KEYS entry,
// which Node takes as a string) does not learn the secret from it. The
// secret is 128 random bits or more, so a plain hash cannot be inverted
// by trying secrets, and 128 bits keep the tombstones of one key's tries
// apart (see the key layout in the package documentation). A try
// computes it once, with its secret.
func (k lockKeys) tombOf(secret []byte) string {
	sum := sha256.Sum256(secret)
	var digest [2 * tombDigest]byte
	hex.Encode(digest[:], sum[:tombDigest])
	return k.base + suffixTomb + string(digest[:])
}

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
