package etcdlock_test

import (
	"testing"

	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/internal/backendurl"
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
	f.Fuzz(func(t *testing.T, prefix, user, password, suffix string) {
		raw := prefix + user + ":" + password + "@" + suffix
		_, err := etcdlock.ParseURL(raw)
		_, err2 := etcdlock.ParseURL(prefix + user + ":" + backendurl.OtherSecret(password) + "@" + suffix)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("the password decides whether %q parses: %v / %v", raw, err, err2)
		}
		if err != nil && err2 != nil && err.Error() != err2.Error() {
			t.Fatalf("the error shows the password:\n%q: %v\n%q: %v", raw, err, backendurl.OtherSecret(password), err2)
		}
		etcdlock.ParseURL(prefix + suffix)
	})
}
