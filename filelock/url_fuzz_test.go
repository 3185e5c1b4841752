//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock_test

import (
	"testing"

	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/internal/backendurl"
)

// The parse step of OpenURL never panics, and its errors do not depend on
// a password in the URL: with its letters and digits changed, the error
// reads the same.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"file:", "file://", "file:///", "file://localhost/", "file:rel/", ""} {
		f.Add(s, "u", "PASS", "/x")
		f.Add(s, "", "p/w?x#y", "h:1/x?y")
	}
	f.Fuzz(func(t *testing.T, prefix, user, password, suffix string) {
		raw := prefix + user + ":" + password + "@" + suffix
		_, err := filelock.ParseURL(raw)
		_, err2 := filelock.ParseURL(prefix + user + ":" + backendurl.OtherSecret(password) + "@" + suffix)
		if err == nil || err2 == nil {
			t.Fatalf("a URL with user information parses: %q", raw)
		}
		if err.Error() != err2.Error() {
			t.Fatalf("the error shows the password:\n%q: %v\n%q: %v", raw, err, backendurl.OtherSecret(password), err2)
		}
		filelock.ParseURL(prefix + suffix)
	})
}
