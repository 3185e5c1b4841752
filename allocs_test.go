package distlock_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// An uncontended cycle through the Client over memlock allocates what the
// lock needs (its grant, with its context, scope and first handle in it;
// the wait's context) and what memlock does, not a context.AfterFunc per
// wait nor a value context per lock. The bound is generous: it catches a
// return of those, not a single allocation.
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
		name string
		opts []distlock.Option
	}{{"Acquire", nil}, {"TryAcquire", []distlock.Option{distlock.WithWait(false)}}} {
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
			const bound = 14
			if n > bound {
				t.Errorf("%.1f allocations per cycle, want at most %d", n, bound)
			}
			t.Logf("%.1f allocations per cycle", n)
		})
	}
}
