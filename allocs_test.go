package distlock_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// An uncontended cycle through the Client over memlock, with a context
// that never ends, allocates what the lock needs (its grant, with its scope
// and first handle in it; its OnLost callback; the wait's context, which
// is not a cancelCtx) and what memlock does: not a context.AfterFunc per
// wait, nor a value context per lock, nor the lock's own context when
// nobody asks for it. The bounds are tight (memlock allocates the same
// every time): they catch the return of one allocation. WithWait(false)
// costs one more: the options of a lock are copied when it has any.
func TestCycleAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account")
	}
	ctx := context.Background()
	c, err := distlock.New(memlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for _, mode := range []struct {
		name  string
		opts  []distlock.LockOption
		bound float64
	}{{"Acquire", nil, 7}, {"WithWait(false)", []distlock.LockOption{distlock.WithWait(false)}, 8}} {
		t.Run(mode.name, func(t *testing.T) {
			n := testing.AllocsPerRun(200, func() {
				l, err := c.Acquire(ctx, "allocs", mode.opts...)
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			})
			if n > mode.bound {
				t.Errorf("%.1f allocations per cycle, want at most %v", n, mode.bound)
			}
			t.Logf("%.1f allocations per cycle", n)
		})
	}
}
