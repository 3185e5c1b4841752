//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock_test

import (
	"testing"

	"github.com/distlock/distlock/filelock"
)

// rot changes the letters and digits of s within their classes, keeping
// percent-escapes valid or invalid as they were.
func rot(s string) string {
	b := []byte(s) // bytes, not runes: invalid UTF-8 stays as it is
	for i, c := range b {
		switch {
		case '0' <= c && c <= '9':
			b[i] = '0' + (c-'0'+5)%10
		case 'a' <= c && c <= 'f':
			b[i] = 'a' + (c-'a'+3)%6
		case 'A' <= c && c <= 'F':
			b[i] = 'A' + (c-'A'+3)%6
		case 'g' <= c && c <= 'z':
			b[i] = 'g' + (c-'g'+10)%20
		case 'G' <= c && c <= 'Z':
			b[i] = 'G' + (c-'G'+10)%20
		}
	}
	return string(b)
}

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
		_, err2 := filelock.ParseURL(prefix + user + ":" + rot(password) + "@" + suffix)
		if err == nil || err2 == nil {
			t.Fatalf("a URL with user information parses: %q", raw)
		}
		if err.Error() != err2.Error() {
			t.Fatalf("the error shows the password:\n%q: %v\n%q: %v", raw, err, rot(password), err2)
		}
		filelock.ParseURL(prefix + suffix)
	})
}
