package etcdlock

import (
	"strings"
	"testing"

	"github.com/distlock/distlock"
)

// A lock name holds no "/" (so one lock's range never covers another's)
// and decodes back to its key (so distinct keys never share a lock).
func FuzzLockName(f *testing.F) {
	for _, k := range []string{"a", "a/b", "a%2Fb", "%", "%25", "/", "//", "%00/", "ключ/🔒"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if distlock.ValidateKey(key) != nil {
			t.Skip("not a valid key: refused before it reaches the backend")
		}
		name := escapeKey(key)
		if strings.Contains(name, "/") {
			t.Fatalf("escapeKey(%q) = %q holds a /", key, name)
		}
		if got := unescapeKey(name); got != key {
			t.Fatalf("escapeKey(%q) = %q decodes to %q", key, name, got)
		}
		if strings.HasPrefix(DefaultPrefix+name, DefaultPrefix+ownerDir) {
			t.Fatalf("lock name of %q is under the owner records", key)
		}
	})
}
