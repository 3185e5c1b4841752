package distlock

// A set's scope does not stay behind in the scopes that end it.

import (
	"context"
	"testing"
	"testing/synctest"
)

// kidsLen is the number of locks acquired under h that h still ends.
func kidsLen(s *scope) int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.kids) }

// The set's parts released one by one (Locks()), not via
// LockSet.Release: sh stays in the kids map of a caller's lock.
func TestSetLeavesPartsReleasedAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := oneClient(t)
		b, _ := c.Acquire(ctx, "b")
		set, err := c.AcquireAll(b.Context(), []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range set.Locks() {
			l.Release(ctx)
		}
		if n := kidsLen(b.g.scope); n != 0 {
			t.Errorf("b.kids has %d entries after the set's locks were released", n)
		}
		set.Release(ctx)
		if n := kidsLen(b.g.scope); n != 0 {
			t.Errorf("after set.Release: b.kids has %d", n)
		}
		b.Release(ctx)
	})
}

// Many sets under the caller's long-lived lock, each ended by a part loss
// and released: nothing left in b.kids.
func TestSetLeavesAfterLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := oneClient(t)
		b, _ := c.Acquire(ctx, "b")
		for range 10 {
			set, err := c.AcquireAll(b.Context(), []string{"a", "b", "c"})
			if err != nil {
				t.Fatal(err)
			}
			k, _ := c.Acquire(set.Context(), "k")
			set.Lock("a").g.onLost(ErrLockLost)
			k.Release(ctx)
			set.Release(ctx)
		}
		if n := kidsLen(b.g.scope); n != 0 {
			t.Errorf("b.kids has %d", n)
		}
		b.Release(ctx)
	})
}

// A part that has ended before the set is bound ends the set at once, and
// the parts after it do not keep the ended set among those they end.
func TestSetBoundWithEndedPart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := oneClient(t)
		la, _ := c.Acquire(ctx, "a")
		lb, _ := c.Acquire(ctx, "b")
		endOnly(c, la.g, ErrMaxHoldExceeded)
		la.g.scope.end(ErrMaxHoldExceeded)
		s := &LockSet{locks: []*Lock{la, lb}}
		s.bind(ctx)
		if s.Context().Err() == nil {
			t.Error("a set with an ended part is live")
		}
		if n := lb.g.scope.staleKids(); n != 0 {
			t.Errorf("b keeps %d ended sets to end", n)
		}
		s.Release(ctx)
	})
}
