package memlock_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/memlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	srv := memlock.New() // one service; every "process" is a view of it
	distlocktest.Run(t, func(t *testing.T) distlock.Backend { return srv },
		distlocktest.WithTTL(300*time.Millisecond),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			if !srv.Revoke(key) {
				t.Fatalf("Revoke(%q): no grant to revoke", key)
			}
		}))
	if n := memlock.Queued(srv); n != 0 {
		t.Errorf("%d keys still queued after the suite", n)
	}
}
