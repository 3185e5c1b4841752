//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"strings"
	"testing"

	"github.com/distlock/distlock"
)

// A key's file name is a safe single path element (no "/", no NUL, not
// hidden, short enough with any suffix) that decodes back to the key
// unless hashed; two keys never share a name.
func FuzzFileName(f *testing.F) {
	for _, k := range []string{"a", ".", "..", ".hidden", "a/b", "../etc/passwd", "A", "%41", "~sha256-x", strings.Repeat("x", 300), "ключ/🔒"} {
		f.Add(k, k+"x")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if distlock.ValidateKey(a) != nil || distlock.ValidateKey(b) != nil {
			t.Skip("not a valid key: refused before it reaches the backend")
		}
		for _, key := range []string{a, b} {
			name := fileName(key)
			if name == "" || name == "." || name == ".." || strings.HasPrefix(name, ".") || strings.ContainsAny(name, "/\x00") {
				t.Fatalf("fileName(%q) = %q is not a safe file name", key, name)
			}
			if len(name)+len(tmpSuffix) > 255 {
				t.Fatalf("fileName(%q) is %d bytes long", key, len(name))
			}
			if got, ok := keyOfName(name); ok && got != key {
				t.Fatalf("fileName(%q) = %q decodes to %q", key, name, got)
			} else if !ok && !strings.HasPrefix(name, hashPrefix) {
				t.Fatalf("fileName(%q) = %q does not decode", key, name)
			}
		}
		if a != b && fileName(a) == fileName(b) {
			t.Fatalf("keys %q and %q share the file name %q", a, b, fileName(a))
		}
	})
}
