package redislock

// The Redis names of a lock's keys and channel, and their hash tag.

import (
	"crypto/rand"
	"strings"

	"github.com/distlock/distlock/internal/redis/redact"
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
	suffixLast    = ":last"
	suffixQueue   = ":queue"
	suffixAlive   = ":alive"
	suffixChannel = ":released"
	suffixFence   = ":fence"
	suffixWatched = ":watched"
	suffixReaders = ":readers"
	suffixGrants  = ":reader-grants"
	suffixDone    = ":readers-done"

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

// KeyPath returns where key's lock lives in Redis: the lock key,
// prefix + HashTag(key) + ":lock", whose value names the holder (see the
// key layout in the package documentation). The other keys of the lock
// share its prefix and hash tag.
func (b *Backend) KeyPath(key string) string { return b.cfg.prefix + HashTag(key) + suffixLock }

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

// lockKeys are the Redis names used by one grant of a lock, and the
// grant's secret. What holds the secret is a redact.Secret, which go-redis
// writes as its bytes and every log rendering shows as "[secret]": tomb,
// the grant's own tombstone key, held, the start of the lock key's value
// while the grant holds it (its secret and the '|' after it, which the
// scripts compare values with), and secret itself.
type lockKeys struct {
	lock    string
	token   string
	queue   string
	alive   string
	channel string
	last    string
	watched string
	readers string
	grants  string
	done    string
	tomb    redact.Secret
	held    redact.Secret
	secret  redact.Secret
}

// secretLen is the length of a grant's secret: 26 characters of base32,
// 130 random bits, as crypto/rand.Text makes them.
const secretLen = 26

// base32Alphabet is the alphabet of a secret, crypto/rand.Text's.
const base32Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// newSecret fills s with a new secret, as crypto/rand.Text would, without
// allocating a string.
func newSecret(s *[secretLen]byte) {
	_, _ = rand.Read(s[:]) // never fails (crypto/rand.Read)
	for i := range s {
		s[i] = base32Alphabet[s[i]%32] // 256 is a multiple of 32: uniform
	}
}

// keysFor returns the names of the lock on key for the grant with secret,
// and the grant's secret-bearing names and value prefix. The names are
// substrings of one string, and those that hold the secret slices of one
// buffer (see TestClientCycleAllocs); keysFor keeps no reference to
// secret.
func (b *Backend) keysFor(key string, secret []byte) lockKeys {
	base := [...]string{b.cfg.prefix, "{", tagEscaper.Replace(key), "}"}
	n := 0
	for _, s := range base {
		n += len(s)
	}
	suffixes := [...]string{suffixLock, suffixToken, suffixQueue, suffixAlive, suffixChannel, suffixLast, suffixWatched,
		suffixReaders, suffixGrants, suffixDone}
	var sb strings.Builder
	sb.Grow(len(suffixes)*n + len(suffixLock+suffixToken+suffixQueue+suffixAlive+suffixChannel+suffixLast+suffixWatched+
		suffixReaders+suffixGrants+suffixDone))
	var ends [len(suffixes)]int
	for i, suffix := range suffixes {
		for _, s := range base {
			sb.WriteString(s)
		}
		sb.WriteString(suffix)
		ends[i] = sb.Len()
	}
	all := sb.String()
	at := func(i int) string {
		if i == 0 {
			return all[:ends[0]]
		}
		return all[ends[i-1]:ends[i]]
	}
	// The tombstone's name, which ends with the secret, then '|': the
	// value prefix is the end of it.
	sec := make([]byte, 0, n+len(suffixTomb)+len(secret)+1)
	for _, s := range base {
		sec = append(sec, s...)
	}
	sec = append(sec, suffixTomb...)
	sec = append(sec, secret...)
	sec = append(sec, '|')
	tomb, held := sec[:len(sec)-1:len(sec)-1], sec[len(sec)-1-len(secret):]
	return lockKeys{lock: at(0), token: at(1), queue: at(2), alive: at(3), channel: at(4), last: at(5), watched: at(6),
		readers: at(7), grants: at(8), done: at(9),
		tomb: redact.Bytes(tomb), held: redact.Bytes(held), secret: redact.Bytes(held[:len(secret):len(secret)])}
}

// scriptArgs are the arguments that every script call of one grant
// passes, as interface values made once for all of them. They are
// pointers (see TestClientCycleAllocs): to the names, strings, which
// go-redis writes as the strings, and routes by in a Cluster; and to the
// redact.Secret values of the names and values that hold the grant's
// secret, which go-redis writes as their bytes, and which a hook that logs
// or traces commands (cmd.String, or cmd.Args() encoded as JSON) shows as
// "[secret]". No script's first key holds a secret: go-redis routes by
// that one in a Cluster, as a string.
type scriptArgs struct {
	lock, token, queue, alive, tomb, last, watched, readers, grants, done, held any
}

// boxArgs makes the scriptArgs of k, which must not change afterwards (the
// attempt's own field: it lives as long as its leases).
func boxArgs(k *lockKeys) scriptArgs {
	return scriptArgs{lock: &k.lock, token: &k.token, queue: &k.queue, alive: &k.alive, tomb: &k.tomb, last: &k.last, watched: &k.watched,
		readers: &k.readers, grants: &k.grants, done: &k.done, held: &k.held}
}

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
