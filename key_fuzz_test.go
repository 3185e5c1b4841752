package distlock

import (
	"errors"
	"testing"
	"unicode/utf8"
)

// ValidateKey never panics, refuses with ErrInvalidKey, and accepts only
// non-empty, bounded, valid UTF-8 without control characters.
func FuzzValidateKey(f *testing.F) {
	for _, k := range []string{"", "a", "a\x00b", "\x7f", "\xff", "\u0085", "jobs/nightly", "ключ"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := ValidateKey(key)
		if err != nil {
			if !errors.Is(err, ErrInvalidKey) {
				t.Fatalf("ValidateKey(%q) = %v, not ErrInvalidKey", key, err)
			}
			return
		}
		if key == "" || len(key) > MaxKeyLen || !utf8.ValidString(key) {
			t.Fatalf("ValidateKey accepted %q", key)
		}
		for _, r := range key {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				t.Fatalf("ValidateKey accepted %q with control character %U", key, r)
			}
		}
	})
}
