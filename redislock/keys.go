package redislock

// The Redis names of a lock's keys and channel, and their hash tag.

import (
	"strings"
)

// DefaultPrefix is the prefix of every Redis key and channel a Backend uses,
// unless set with WithPrefix.
const DefaultPrefix = "distlock:"

// Suffixes of the Redis keys of one lock; see the key layout in the package
// documentation.
const (
	suffixLock    = ":lock"
	suffixToken   = ":token"
	suffixTomb    = ":released:"
	suffixQueue   = ":queue"
	suffixAlive   = ":alive"
	suffixChannel = ":released"
	suffixFence   = ":fence"

	// wakeSuffix follows the prefix in the name of a Backend's wake
	// channel: prefix + "waiters:" + the Backend's id.
	wakeSuffix = "waiters:"
)

// tagEscaper escapes the characters that would let a user key end the hash
// tag early ('}') or be confused with an escape ('%'); '{' is escaped too,
// so that the tag reads unambiguously. The mapping is injective: distinct
// keys always give distinct tags.
var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

var tagUnescaper = strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}")

// HashTag returns the Redis Cluster hash tag of a lock key or fence
// resource: "{" + the key with '%', '{' and '}' percent-escaped + "}". Every
// Redis key of one lock contains it, so all of them hash to one slot
// whatever braces the key itself contains. Name data keys guarded by a
// Fence with it, for example "orders:" + HashTag("acct/42") + ":balance".
func HashTag(key string) string {
	return "{" + tagEscaper.Replace(key) + "}"
}

// keyTag returns the content of the hash tag of a Redis key, by the
// Cluster rule: the text between the first '{' and the first '}' after it,
// if not empty; otherwise the whole key.
func keyTag(rkey string) string {
	if i := strings.IndexByte(rkey, '{'); i >= 0 {
		if j := strings.IndexByte(rkey[i+1:], '}'); j > 0 {
			return rkey[i+1 : i+1+j]
		}
	}
	return rkey
}

// lockKeys are the Redis names used by one lock.
type lockKeys struct {
	base    string // prefix + hash tag
	lock    string
	token   string
	queue   string
	alive   string
	channel string
}

func (b *Backend) keysFor(key string) lockKeys {
	base := b.cfg.prefix + HashTag(key)
	return lockKeys{
		base:    base,
		lock:    base + suffixLock,
		token:   base + suffixToken,
		queue:   base + suffixQueue,
		alive:   base + suffixAlive,
		channel: base + suffixChannel,
	}
}

// tomb returns the tombstone key of the grant with the given secret.
func (k lockKeys) tomb(secret string) string { return k.base + suffixTomb + secret }

// decodeLockKey returns the user key of a Redis lock key under prefix.
func decodeLockKey(prefix, rkey string) (string, bool) {
	s, ok := strings.CutPrefix(rkey, prefix+"{")
	if !ok {
		return "", false
	}
	s, ok = strings.CutSuffix(s, "}"+suffixLock)
	if !ok || s == "" || strings.ContainsAny(s, "{}") {
		return "", false
	}
	return tagUnescaper.Replace(s), true
}

// globEscape escapes the glob characters of SCAN MATCH.
var globEscape = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)
