//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock_test

import (
	"testing"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/filelock"
)

// The parse step of OpenURL never panics, and its errors do not depend on
// a password in the URL: with its letters and digits changed, the error
// reads the same.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"file:", "file://", "file:///", "file://localhost/", "file:rel/", ""} {
		f.Add(s, "u", "PASS", "/x")
		f.Add(s, "", "p/w?x#y", "h:1/x?y")
	}
	parse := func(raw string) error { _, err := filelock.ParseURL(raw); return err }
	f.Fuzz(func(t *testing.T, prefix, user, password, suffix string) {
		if raw := prefix + user + ":" + password + "@" + suffix; parse(raw) == nil {
			t.Fatalf("a URL with user information parses: %q", raw)
		}
		distlocktest.PasswordBlind(t, parse, prefix, user, password, suffix)
	})
}
