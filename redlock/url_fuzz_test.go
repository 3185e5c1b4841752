package redlock

import (
	"testing"

	"github.com/distlock/distlock/distlocktest"
)

// parseURL never panics, and its errors do not depend on the password:
// with its letters and digits changed, the error reads the same.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redlock:", "redlocks:", "redlock://", "redlocks://", "redlock:/", "redlock:///", ""} {
		f.Add(s, "default", "PASS", "10.0.0.5:6380,10.0.0.6,[::1]:7000/0")
		f.Add(s, "", "p/w@x", "h1,h2,h3?dial_timeout=1s&prefix=a&request_timeout=20ms")
		f.Add(s, "u", "pw", "h1,h1?max_ttl=1m&ca=x")
	}
	parse := func(raw string) error { _, err := parseURL(raw); return err }
	f.Fuzz(func(t *testing.T, prefix, user, password, suffix string) {
		distlocktest.PasswordBlind(t, parse, prefix, user, password, suffix)
	})
}
