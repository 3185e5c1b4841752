package redlock

import (
	"testing"

	"github.com/distlock/distlock/internal/backendurl"
)

// parseURL never panics, and its errors do not depend on the password:
// with its letters and digits changed, the error reads the same.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redlock:", "redlocks:", "redlock://", "redlocks://", "redlock:/", "redlock:///", ""} {
		f.Add(s, "default", "PASS", "10.0.0.5:6380,10.0.0.6,[::1]:7000/0")
		f.Add(s, "", "p/w@x", "h1,h2,h3?dial_timeout=1s&prefix=a&node_timeout=20ms")
		f.Add(s, "u", "pw", "h1,h1?max_ttl=1m&ca=x")
	}
	f.Fuzz(func(t *testing.T, prefix, user, password, suffix string) {
		raw := prefix + user + ":" + password + "@" + suffix
		_, err := parseURL(raw)
		_, err2 := parseURL(prefix + user + ":" + backendurl.OtherSecret(password) + "@" + suffix)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("the password decides whether %q parses: %v / %v", raw, err, err2)
		}
		if err != nil && err.Error() != err2.Error() {
			t.Fatalf("the error shows the password:\n%q: %v\n%q: %v", raw, err, backendurl.OtherSecret(password), err2)
		}
		// Any string at all: no panic.
		parseURL(prefix + suffix)
	})
}
