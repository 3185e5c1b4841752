package zklock_test

import (
	"testing"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/zklock"
)

// The parse step of OpenURL never panics, and its errors read the same
// whatever the password (a mistyped URL can put it anywhere).
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"zk://", "zk:", "zk:///", "zk://h1:2181,h2/", "ZK://[::1]:2181/p?session_timeout=", ""} {
		f.Add(s, "u", "PASS", "h1:2181/locks?request_timeout=1s")
		f.Add(s, "", "p/w?x#y@", ",,h:1/x?y=%zz")
	}
	f.Fuzz(func(t *testing.T, prefix, user, password, suffix string) {
		distlocktest.PasswordBlind(t, zklock.ParseURL, prefix, user, password, suffix)
	})
}
