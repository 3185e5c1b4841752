package redislock

import (
	"testing"

	"github.com/distlock/distlock/distlocktest"
)

// parseURL never panics, and its errors do not depend on the password:
// with its letters and digits changed, the error reads the same.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redis:", "rediss:", "redis+cluster:", "rediss+cluster:", "redis+sentinel:",
		"redis://", "redis+cluster://", "redis+sentinel://", "redis:/", "redis:///", ""} {
		f.Add(s, "default", "PASS", "10.0.0.5:6380/0")
		f.Add(s, "", "p/w@x", "h1,[::1]:7000?dial_timeout=1s&prefix=a")
		f.Add(s, "u", "pw", "s1,s2/main/1?unordered=true")
	}
	parse := func(raw string) error { _, err := parseURL(raw); return err }
	f.Fuzz(func(t *testing.T, prefix, user, password, suffix string) {
		distlocktest.PasswordBlind(t, parse, prefix, user, password, suffix)
	})
}
