package rwlock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// TestConformance runs the read/write lock conformance suite (which
// drives this package) over the in-process service, the reference
// backend; every other backend runs it against its real service in its
// own tests.
func TestConformance(t *testing.T) {
	srv := memlock.New()
	t.Cleanup(func() { srv.Close() })
	distlocktest.RunShared(t, func(t *testing.T) driver.Backend { return srv },
		distlocktest.WithTTL(300*time.Millisecond),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			if !srv.Revoke(key) {
				t.Fatalf("Revoke(%q): no grant to revoke", key)
			}
		}))
}
