package etcdlock_test

import (
	"testing"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/etcdlock"
)

// The parse step of OpenURL never panics, and its errors do not depend on
// the password: with its letters and digits changed, the error reads the
// same.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"etcd:", "etcds:", "etcd://", "etcds://", "etcd:/", "etcd:///", ""} {
		f.Add(s, "root", "PASS", "h1:2379,[::1]/app?dial_timeout=1s")
		f.Add(s, "u", "p/w?x#y", "h1?ca=x&request_timeout=2s")
		f.Add(s, "", "pw", "")
	}
	parse := func(raw string) error { _, err := etcdlock.ParseURL(raw); return err }
	f.Fuzz(func(t *testing.T, prefix, user, password, suffix string) {
		distlocktest.PasswordBlind(t, parse, prefix, user, password, suffix)
	})
}
