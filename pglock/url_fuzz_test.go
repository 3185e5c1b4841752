package pglock_test

import (
	"testing"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/pglock"
)

// OpenURL's parse step never panics, and its errors read the same whatever
// the password: with the password's letters and digits changed, the
// outcome and the error are the same, so no error shows it.
func FuzzOpenURL(f *testing.F) {
	for _, s := range []string{"postgres://", "postgresql://", "postgres:", "postgres:///", "POSTGRES://", "redis://", ""} {
		f.Add(s, "app", "PASS", "db.internal:5432/app?sslmode=disable")
		f.Add(s, "", "p/w?x#y@", "h1,h2:6432/app?mode=lease&listen_host=h3:5432&poll_interval=50ms")
		f.Add(s, "u", "pw", "[::1]/db?mode=bogus&loss_grace=1s&request_timeout=x")
		f.Add(s, "u", "s3cret%2F", "h/db?mode=session&listen_host=h2&pool_max_conns=4")
		f.Add(s, "u", "pw", "h/db?mode=table")
	}
	f.Fuzz(func(t *testing.T, prefix, user, password, suffix string) {
		distlocktest.PasswordBlind(t, pglock.ParseURL, prefix, user, password, suffix)
	})
}
