package distlock_test

// Sets taken under the context of a lock or of another set, with keys that
// context already holds (from review).

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// acq acquires k or fails the test.
func acq(t *testing.T, c *distlock.Client, ctx context.Context, k string) *distlock.Lock {
	t.Helper()
	l, err := c.Acquire(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// isDone reports whether ctx has ended.
func isDone(ctx context.Context) bool { return ctx.Err() != nil }

// A set taken under another set's context, whose first (sorted) key is a
// part of the outer set, ends with the outer set, and so do the locks
// taken under it. (The first key was reentered, and the set used to end
// only with its freshly acquired parts.)
func TestSetUnderSetFirstKeyReentered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newClient(t, memlock.New())
		outer, err := c.AcquireAll(ctx, []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.AcquireAll(outer.Context(), []string{"a", "c"})
		if err != nil {
			t.Fatal(err)
		}
		w := acq(t, c, inner.Context(), "w")
		outer.Release(ctx)
		if !isDone(inner.Context()) {
			t.Error("outer set released; inner set taken under its context is live")
		}
		if inner.Err() == nil {
			t.Error("outer set released; inner.Err() == nil")
		}
		if !isDone(w.Context()) {
			t.Error("outer set released; lock under the inner set is live")
		}
		w.Release(ctx)
		inner.Release(ctx)
	})
}

// The same with a plain enclosing lock: set {x, z} taken under y (itself
// taken under x) ends with y.
func TestSetUnderLockFirstKeyReentered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		c := newClient(t, srv)
		x := acq(t, c, ctx, "x")
		y := acq(t, c, x.Context(), "y")
		set, err := c.AcquireAll(y.Context(), []string{"x", "z"})
		if err != nil {
			t.Fatal(err)
		}
		srv.Revoke("y")
		if !isDone(y.Context()) {
			t.Fatal("y not ended")
		}
		if !isDone(set.Context()) || set.Err() == nil {
			t.Errorf("y lost; set taken under y's context is live (Err %v)", set.Err())
		}
		set.Release(ctx)
		y.Release(ctx)
		x.Release(ctx)
	})
}

// A set whose every key was reentered still ends with the set it was
// taken under.
func TestSetUnderSetAllReentered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newClient(t, memlock.New())
		outer, err := c.AcquireAll(ctx, []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		inner, err := c.AcquireAll(outer.Context(), []string{"a"})
		if err != nil {
			t.Fatal(err)
		}
		outer.Release(ctx)
		if !isDone(inner.Context()) {
			t.Error("outer set released; inner set {a} is live")
		}
		inner.Release(ctx)
	})
}

// AcquireAll of two keys the caller's context holds reenters both. (After
// reentering the first, it used to lose the caller's chain, and waited for
// itself on the second.)
func TestSetOfTwoHeldKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newClient(t, memlock.New())
		x := acq(t, c, ctx, "x")
		y := acq(t, c, x.Context(), "y")
		set, err := c.AcquireAll(y.Context(), []string{"x", "y"}, distlock.WithWait(false))
		if err != nil {
			t.Errorf("AcquireAll of two keys the context holds: %v", err)
		} else {
			set.Release(ctx)
		}
		y.Release(ctx)
		x.Release(ctx)
	})
}

// Double release, Close while held, release after Close, concurrent
// release with a loss; cross-client lock under the set.
func TestSetReleaseRacesLossAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		c := newClient(t, srv)
		c2 := newClient(t, srv)
		set, err := c.AcquireAll(ctx, []string{"a", "b", "c"})
		if err != nil {
			t.Fatal(err)
		}
		o := acq(t, c2, set.Context(), "o")
		r, err := c.TryAcquire(set.Context(), "b")
		if err != nil || r.Token() != set.Lock("b").Token() {
			t.Fatalf("reentrant: %v", err)
		}
		if _, ok := r.Deadline(); !ok {
			t.Error("no deadline")
		}
		r.Refresh(ctx)
		r.Release(set.Context())
		var wg sync.WaitGroup
		wg.Go(func() { srv.Revoke("a") })
		wg.Go(func() { set.Release(set.Context()) })
		wg.Go(func() { _ = set.Err(); _ = o.Err() })
		wg.Wait()
		if !isDone(o.Context()) {
			t.Error("cross-client lock under set live")
		}
		if err := set.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("second release: %v", err)
		}
		o.Release(ctx)

		set2, err := c.AcquireAll(ctx, []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		k := acq(t, c, set2.Context(), "k")
		if err := c.Close(ctx); err != nil {
			t.Error(err)
		}
		if !isDone(set2.Context()) || !errors.Is(set2.Err(), distlock.ErrReleased) {
			t.Errorf("after Close: %v", set2.Err())
		}
		_ = k.Release(ctx)
		_ = set2.Release(ctx)
		if hs, _ := srv.List(ctx, ""); len(hs) != 0 {
			t.Errorf("left behind: %+v", hs)
		}
	})
}
