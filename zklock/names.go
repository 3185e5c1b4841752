package zklock

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"
)

// DefaultPrefix is the ZooKeeper path under which a Backend keeps its locks
// when WithPrefix is not given.
const DefaultPrefix = "/distlock"

// The names nodes have after their protection prefix, the sequence
// number following: lockName a lock's, as Curator's InterProcessMutex
// names them, latchName an election's candidacy's, as Curator's
// LeaderLatch names them, and readName and writeName a shared grant's and
// a writer's (AcquireOptions.Writer), as Curator's
// InterProcessReadWriteLock names its read and write locks' nodes.
const (
	lockName  = "lock-"
	latchName = "latch-"
	readName  = "__READ__"
	writeName = "__WRIT__"
)

// protectedPrefix starts every protected node name; the UUID and a "-"
// follow it.
const protectedPrefix = "_c_"

// KeyPath returns where key's lock lives in ZooKeeper: the path of its lock
// node's parent, the Backend's prefix, "/", then the key with "%" written "%25", "/" written "%2F", a leading
// "." written "%2E", and every character ZooKeeper refuses in a path
// (controls, surrogates and the private use area, U+FFF0 to U+FFFF, and
// everything above U+FFFF, which Java strings hold as surrogate pairs) written
// as the %XX of its UTF-8 bytes. The escaping is reversible, so distinct keys
// never share a path, and the result is a single child of prefix, so no key
// reaches outside it. Curator's InterProcessMutex on that path contends
// for the same lock.
func (b *Backend) KeyPath(key string) string { return lockPath(b.cfg.prefix, key) }

// lockPath is the lock path of key under prefix (see KeyPath).
func lockPath(prefix, key string) string { return prefix + "/" + escapeKey(key) }

func escapeKey(key string) string {
	if clean(key) {
		return key // most keys: no copy
	}
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i, r := range key {
		if escaped(i, r) {
			var buf [utf8.UTFMax]byte
			for _, c := range buf[:utf8.EncodeRune(buf[:], r)] {
				fmt.Fprintf(&b, "%%%02X", c)
			}
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// escaped reports whether escapeKey writes r, at byte i of the key, as
// %XX.
func escaped(i int, r rune) bool {
	return r == '%' || r == '/' || (r == '.' && i == 0) || refused(r)
}

// clean reports whether escapeKey leaves key as it is.
func clean(key string) bool {
	for i, r := range key {
		if escaped(i, r) {
			return false
		}
	}
	return true
}

// refused reports whether ZooKeeper refuses r in a path.
func refused(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || r >= 0xfff0 || r == utf8.RuneError
}

// unescapeKey reverses escapeKey; it reports false for a name escapeKey
// cannot have written.
func unescapeKey(name string) (string, bool) {
	if !strings.Contains(name, "%") {
		return name, name != "" && utf8.ValidString(name)
	}
	var b []byte
	for i := 0; i < len(name); i++ {
		if name[i] != '%' {
			b = append(b, name[i])
			continue
		}
		if i+2 >= len(name) {
			return "", false
		}
		v, err := hex.DecodeString(name[i+1 : i+3])
		if err != nil {
			return "", false
		}
		b = append(b, v[0])
		i += 2
	}
	key := string(b)
	return key, utf8.ValidString(key) && escapeKey(key) == name
}

// checkPrefix checks a prefix given to WithPrefix: an absolute ZooKeeper
// path other than the root and outside /zookeeper, with no empty, "." or
// ".." segment and no character ZooKeeper refuses.
func checkPrefix(p string) error {
	switch {
	case len(p) < 2 || p[0] != '/' || p[len(p)-1] == '/' || len(p) > maxPrefixLen:
		return fmt.Errorf("prefix %q is not an absolute path of 2 to %d bytes without a trailing /", p, maxPrefixLen)
	case !utf8.ValidString(p):
		return fmt.Errorf("prefix is not valid UTF-8")
	case p == "/zookeeper" || strings.HasPrefix(p, "/zookeeper/"):
		return fmt.Errorf("prefix %q is in ZooKeeper's own tree", p)
	case path.Clean(p) != p:
		return fmt.Errorf("prefix %q is not a clean path", p)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." || seg[0] == '.' {
			return fmt.Errorf("prefix %q has a segment that is empty or starts with a dot", p)
		}
		for _, r := range seg {
			if refused(r) {
				return fmt.Errorf("prefix %q holds %U, which ZooKeeper refuses", p, r)
			}
		}
	}
	return nil
}

// newUUID returns a random (version 4) UUID in its canonical form: 36
// characters, lowercase hex in groups of 8-4-4-4-12. Curator recognises a
// protected node only by a UUID in that form.
func newUUID() (string, error) {
	var u [16]byte
	if _, err := rand.Read(u[:]); err != nil {
		return "", err
	}
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], nil
}

// nodePrefix is what a node is created with (ZooKeeper appends the
// sequence): "_c_<uuid>-" and name (lockName or latchName).
func nodePrefix(uuid, name string) string { return protectedPrefix + uuid + "-" + name }

// protectedID returns the UUID of a protected node name, as Curator finds
// it: the name starts with "_c_", is longer than the 40 characters of
// "_c_<uuid>-" and has the "-" at the 40th.
func protectedID(name string) (string, bool) {
	const n = len(protectedPrefix) + 36 + 1
	if len(name) <= n || !strings.HasPrefix(name, protectedPrefix) || name[n-1] != '-' {
		return "", false
	}
	return name[len(protectedPrefix) : n-1], true
}

// sortKey is what the nodes under a lock path are ordered by: their
// sequence, the part after the last "lock-", "latch-", "__READ__" or
// "__WRIT__", whichever comes latest, or the whole name if it has none,
// compared as strings. Sequences are zero-padded to 10 digits, so the
// string order is the sequence order, and ZooKeeper numbers the
// sequential children of a parent from one counter, so locks,
// candidacies, shared grants and writers under one path are ordered by
// creation, every kind together.
//
// Curator's recipes each look for their own names only (InterProcessMutex
// "lock-", LeaderLatch "latch-", InterProcessReadWriteLock "__READ__" and
// "__WRIT__") and order the others' nodes by the whole name, which starts
// with "_c_" and so comes after every sequence: each puts the others'
// nodes behind its own (see Elections and Shared locks in the package
// documentation). For nodes of one recipe, this order is Curator's.
func sortKey(name string) string {
	seq, _ := sequenceOf(name)
	return seq
}

// sequenceOf returns what sortKey orders name by, and the name that
// precedes it (lockName, latchName, readName or writeName; "" for none).
func sequenceOf(name string) (string, string) {
	// Every node of a recipe ends in its name and the sequence's digits,
	// and then that name is the last of them in the node's: it is found
	// without searching the whole name.
	digits := len(name)
	for digits > 0 && name[digits-1] >= '0' && name[digits-1] <= '9' {
		digits--
	}
	for _, k := range [...]string{lockName, readName, writeName, latchName} {
		if strings.HasSuffix(name[:digits], k) {
			return name[digits:], k
		}
	}
	at, kind := -1, ""
	for _, k := range [...]string{lockName, latchName, readName, writeName} {
		if i := strings.LastIndex(name, k); i >= 0 && (at < 0 || i > at) {
			at, kind = i, k
		}
	}
	if at < 0 {
		return name, ""
	}
	return name[at+len(kind):], kind
}

// reader reports whether name, a child of a lock path, is a shared
// grant's node ("__READ__"), this package's or Curator's read lock's.
func reader(name string) bool {
	_, kind := sequenceOf(name)
	return kind == readName
}

// sortNodes sorts the children of a lock path into queue order, stably, as
// Curator's sort (a stable merge sort) does.
func sortNodes(children []string) {
	slices.SortStableFunc(children, func(a, b string) int { return strings.Compare(sortKey(a), sortKey(b)) })
}
