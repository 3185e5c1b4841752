package distlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// Lock sets (AcquireAll): their parts, their context, and sets taken under
// the context of a lock or of another set with keys that context holds.

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

// A set's context ends in the same step as the part that was lost.
func TestSetEndsWithItsPart(t *testing.T) {
	inBubble(t, func(t *testing.T, srv *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
		set, err := c.AcquireAll(ctx, []string{"a", "b", "c", "d", "e", "f", "g", "h"})
		if err != nil {
			t.Fatal(err)
		}
		srv.Revoke("a") // the loss is reported synchronously, under memlock's lock
		select {
		case <-set.Done():
		default:
			t.Fatal("key a lost but the set's context is live")
		}
		set.Release(ctx)
	})
}

// A set with a key the caller already held (reentered, so not acquired
// under the set's other locks): the set's context still ends with every
// part, and carries every part for reentrant acquisition.
func TestSetWithHeldKey(t *testing.T) {
	inBubble(t, func(t *testing.T, srv *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
		b, err := c.Acquire(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		set, err := c.AcquireAll(b.Context(), []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		a2, err := c.TryAcquire(set.Context(), "a")
		if err != nil {
			t.Fatalf("reentrant TryAcquire of a through the set's context: %v", err)
		}
		if a2.Token() != set.Lock("a").Token() {
			t.Errorf("reentrant handle has token %d, the set's lock %d", a2.Token(), set.Lock("a").Token())
		}
		a2.Release(ctx)
		inner, err := c.Acquire(set.Context(), "z")
		if err != nil {
			t.Fatal(err)
		}
		srv.Revoke("a")
		select {
		case <-set.Done():
		default:
			t.Fatal("key a lost but the set's context is live")
		}
		if err := set.Err(); !errors.Is(err, distlock.ErrLockLost) {
			t.Errorf("set Err %v, want ErrLockLost", err)
		}
		if inner.Context().Err() == nil {
			t.Error("a lock acquired under the set outlived the set")
		}
		inner.Release(ctx)
		set.Release(ctx)
		if err := b.Err(); err != nil {
			t.Errorf("the caller's own hold on b ended with the set: %v", err)
		}
		b.Release(ctx)
		if hs, _ := srv.List(ctx, ""); len(hs) != 0 {
			t.Errorf("left behind: %+v", hs)
		}
	})
}

// Releasing a set ends its context before its locks are released, and
// detaches it from a lock the caller still holds.
func TestSetReleaseEndsContext(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
		b, _ := c.Acquire(ctx, "b")
		set, err := c.AcquireAll(b.Context(), []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := set.Err(); !errors.Is(err, distlock.ErrReleased) {
			t.Errorf("released set: Err %v, want ErrReleased", err)
		}
		if b.Err() != nil {
			t.Errorf("b ended with the set: %v", b.Err())
		}
		b.Release(ctx)
	})
}

// A set taken under another set's context, whose first (sorted) key is a
// part of the outer set, ends with the outer set, and so do the locks
// taken under it. (The first key was reentered, and the set used to end
// only with its freshly acquired parts.)
func TestSetUnderSetFirstKeyReentered(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
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
	inBubble(t, func(t *testing.T, srv *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
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
	inBubble(t, func(t *testing.T, _ *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
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
	inBubble(t, func(t *testing.T, _ *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
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
	inBubble(t, func(t *testing.T, srv *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
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

// A set's parts are symmetric: a part lost ends the set, whose Err names
// it, and leaves every other part's Err and context alone, whichever part
// it is.
func TestSetPartsAreSymmetric(t *testing.T) {
	for _, lost := range []string{"a", "b", "c"} {
		t.Run(lost, func(t *testing.T) {
			inBubble(t, func(t *testing.T, srv *memlock.Backend, c *distlock.Client) {
				ctx := context.Background()
				set, err := c.AcquireAll(ctx, []string{"c", "a", "b"})
				if err != nil {
					t.Fatal(err)
				}
				srv.Revoke(lost)
				synctest.Wait()
				var ke *distlock.KeyError
				if err := set.Err(); !errors.As(err, &ke) || ke.Op != "hold" || ke.Key != lost || !errors.Is(err, distlock.ErrLockLost) {
					t.Errorf("set Err %v, want a KeyError naming %q, matching ErrLockLost", err, lost)
				}
				if set.Context().Err() == nil {
					t.Error("set context live with a part lost")
				}
				for _, l := range set.Locks() {
					if l.Key() == lost {
						if !errors.Is(l.Err(), distlock.ErrLockLost) {
							t.Errorf("lost part %s: Err %v", l.Key(), l.Err())
						}
						continue
					}
					if err := l.Err(); err != nil {
						t.Errorf("part %s is held, but its Err is %v", l.Key(), err)
					}
					if l.Context().Err() != nil {
						t.Errorf("part %s is held, but its context ended: %v", l.Key(), context.Cause(l.Context()))
					}
				}
				set.Release(ctx)
			})
		})
	}
}
