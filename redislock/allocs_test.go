package redislock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

// An uncontended cycle through the Backend allocates its attempt, its
// lease, the commands and what go-redis does for them, not an interface
// value per script argument, nor a waiter id or a timer for a waiting
// Acquire that never waits. The bound is generous (go-redis's share may
// change with its version): it catches a return of those, not a single
// allocation.
func TestCycleAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account")
	}
	srv := startRedis(t)
	ctx := testCtx(t)
	b := newBackend(t, srv.Addr)
	for _, wait := range []bool{false, true} {
		opts := driver.AcquireOptions{TTL: time.Minute, Wait: wait}
		cycle := func() {
			l, err := b.Acquire(ctx, "allocs", opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		cycle() // loads the scripts, checks the eviction policy
		n := testing.AllocsPerRun(200, cycle)
		const bound = 24
		if n > bound {
			t.Errorf("wait %v: %.1f allocations per cycle, want at most %d", wait, n, bound)
		}
		t.Logf("wait %v: %.1f allocations per cycle", wait, n)
	}
}
