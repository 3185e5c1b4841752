package distlock_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// An uncontended cycle through the Client over memlock allocates what the
// lock needs and what memlock does, and none of what the Client's code is
// shaped to save. The bounds are tight (memlock allocates the same every
// time): each catches the return of one allocation.
//
// Acquire, with a context that never ends, allocates the grant, with its
// scope, its context node and its first handle in it (grant.go), not
// apart; its OnLost callback; and the wait's context, a closingCtx: not a
// cancelCtx of its own, nor a registration for Close to cancel, nor a Done
// channel made at the first select on it (go-redis selects on it for every
// command). Not the lock's own context, made when asked for. Not a copy of
// the lock's options when it has none (config.withLock returns before its
// config would escape). Nothing for the end of a released lock: errPtr
// shares one pointer for ErrReleased, and does not take &err, which would
// move err to the heap on every call. Nor a Debug log line, built only for
// a logger that takes it (the default discards everything).
//
// TryAcquire costs as much: it sets wait in the lock's config rather than
// appending WithWait(false), which costs one more (the options of a lock
// are copied when it has any). A wait context that can end costs one more,
// its cancelCtx, which Close cancels through the Client's table of waits
// (a context.AfterFunc on the Client's closing context would cost three).
// Asking for the lock's context costs two, the scope's cancelCtx and its
// cancel func: what they derive from, a holdCtx, lives in the scope, where
// context.WithoutCancel and context.WithValue would cost two more.
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
	cancellable, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, mode := range []struct {
		name    string
		acquire func() (*distlock.Lock, error)
		bound   float64
	}{
		{"Acquire", func() (*distlock.Lock, error) { return c.Acquire(ctx, "allocs") }, 7},
		{"TryAcquire", func() (*distlock.Lock, error) { return c.TryAcquire(ctx, "allocs") }, 7},
		{"WithWait(false)", func() (*distlock.Lock, error) { return c.Acquire(ctx, "allocs", distlock.WithWait(false)) }, 8},
		{"cancellable wait", func() (*distlock.Lock, error) { return c.Acquire(cancellable, "allocs") }, 8},
		{"Context", func() (*distlock.Lock, error) {
			l, err := c.Acquire(ctx, "allocs")
			if err == nil && l.Context().Err() != nil {
				t.Fatal("the lock's context ended while it was held")
			}
			return l, err
		}, 9},
	} {
		t.Run(mode.name, func(t *testing.T) {
			n := testing.AllocsPerRun(200, func() {
				l, err := mode.acquire()
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
