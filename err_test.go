package distlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock/driver"
)

// oneClient returns a Client over oneAtATime, closed when the test ends.
func oneClient(t *testing.T) *Client {
	t.Helper()
	c, err := New(&oneAtATime{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// oneLock returns oneClient and a lock on "k" from it.
func oneLock(t *testing.T) (*Client, *Lock) {
	t.Helper()
	c := oneClient(t)
	l, err := c.Acquire(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	return c, l
}

// passDeadline moves h's deadline into the past without telling the
// watchdog, as if the process had been paused.
func passDeadline(c *Client, h *grant) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.until.Store(untilOf(time.Now().Add(-time.Nanosecond)))
}

// endOnly is the first half of Client.end: the hold is ended under c.mu;
// its context would be cancelled after c.mu is released.
func endOnly(c *Client, h *grant, cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endLocked(h, cause)
}

// Err reports a lock whose local deadline has passed, even while the
// watchdog has not run to cancel its context (as after a process pause,
// when the holder's goroutine may run first).
func TestErrAtDeadlineBeforeWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, l := oneLock(t)
		if err := l.Err(); err != nil {
			t.Fatalf("fresh lock: Err %v", err)
		}
		// The deadline passes; the watchdog's timer is still set for the
		// renewal, seconds away, and no time passes in the bubble.
		passDeadline(c, l.g)
		if l.Context().Err() != nil {
			t.Fatal("the watchdog ran: the test shows nothing")
		}
		if err := l.Err(); !errors.Is(err, ErrDeadlinePassed) || !errors.Is(err, ErrLockLost) {
			t.Errorf("deadline passed, context not yet cancelled: Err %v, want ErrDeadlinePassed", err)
		}
		l.Release(ctx)
	})
}

// Err reports a lock the Client has ended from that instant, before the
// cancellation of its context has been delivered.
func TestErrOnceEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, l := oneLock(t)
		cause := errors.Join(ErrLockLost, errors.New("reported by the service"))
		endOnly(c, l.g, cause)
		if l.Context().Err() != nil {
			t.Fatal("the context is already cancelled: the test shows nothing")
		}
		if err := l.Err(); !errors.Is(err, ErrLockLost) {
			t.Errorf("ended, context not yet cancelled: Err %v, want the loss", err)
		}
		if _, ok := l.Deadline(); ok {
			t.Errorf("ended lock: Deadline ok")
		}
		l.g.scope.end(cause)
		if err := l.Err(); !errors.Is(err, ErrLockLost) {
			t.Errorf("after the cancellation: Err %v, want the loss", err)
		}
	})
}

// A refresh confirmed after the local deadline does not bring the lock
// back: Err has been reporting it lost since the deadline.
func TestRefreshConfirmedTooLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, l := oneLock(t)
		passDeadline(c, l.g)
		if err := c.applyRefresh(l.g, driver.Validity{Sent: time.Now(), TTL: time.Minute}, nil, byHolder); !errors.Is(err, ErrDeadlinePassed) {
			t.Errorf("refresh confirmed after the deadline: %v, want ErrDeadlinePassed", err)
		}
		if l.Context().Err() == nil {
			t.Error("the lock's context is live after a refresh confirmed too late")
		}
		if err := l.Err(); !errors.Is(err, ErrDeadlinePassed) {
			t.Errorf("Err %v, want ErrDeadlinePassed", err)
		}
	})
}

// A set's Err reports a part whose deadline passed, before any context of
// the set has been cancelled.
func TestSetErrExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := oneClient(t)
		set, err := c.AcquireAll(ctx, []string{"a", "b", "c"})
		if err != nil {
			t.Fatal(err)
		}
		first := set.Lock("a")
		passDeadline(c, first.g)
		if set.Context().Err() != nil {
			t.Fatal("the set's context already ended: the test shows nothing")
		}
		if err := set.Err(); !errors.Is(err, ErrDeadlinePassed) {
			t.Errorf("a part's deadline passed: set Err %v, want ErrDeadlinePassed", err)
		}
		set.Release(ctx)
	})
}

// Err never goes from lost back to nil: a confirmation that waited for the
// Client's lock while the deadline passed (and Err reported it) does not
// extend the deadline. (From review.)
func TestErrNeverComesBack(t *testing.T) {
	c, l := oneLock(t)
	c.mu.Lock()
	l.g.until.Store(untilOf(time.Now().Add(30 * time.Millisecond)))
	// c.mu stays held: the confirmation below waits for it.
	done := make(chan error, 1)
	go func() {
		done <- c.applyRefresh(l.g, driver.Validity{Sent: time.Now(), TTL: time.Minute}, nil, byHolder)
	}()
	time.Sleep(60 * time.Millisecond) // past the deadline: not a timing assumption
	before := l.Err()
	c.mu.Unlock()
	rerr := <-done
	if before == nil {
		t.Fatal("Err nil after the deadline")
	}
	if after := l.Err(); after == nil {
		t.Errorf("Err went from %v back to nil (refresh: %v)", before, rerr)
	}
}

// A lock acquired under another reports the enclosing lock's passed
// deadline and its end before its own context has been cancelled. (From
// review.)
func TestNestedErrExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := oneClient(t)
		p, _ := c.Acquire(ctx, "p")
		k, err := c.Acquire(p.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		enclosedBy := func(err, want error) bool {
			e, ok := errors.AsType[*EnclosingError](err)
			return ok && e.Key == "p" && errors.Is(e.Err, want) && !errors.Is(err, ErrLockLost)
		}
		passDeadline(c, p.g)
		if err := k.Err(); !enclosedBy(err, ErrDeadlinePassed) {
			t.Errorf("enclosing lock's deadline passed: Err %v, want an EnclosingError for p's ErrDeadlinePassed", err)
		}
		endOnly(c, p.g, ErrMaxHoldExceeded)
		if k.Context().Err() != nil {
			t.Fatal("the context is already cancelled: the test shows nothing")
		}
		if err := k.Err(); !enclosedBy(err, ErrLockLost) {
			t.Errorf("enclosing lock ended: Err %v, want an EnclosingError for p's loss", err)
		}
		p.g.scope.end(ErrMaxHoldExceeded)
	})
}

// slowLease's watchdog refreshes (those with a deadline) take 100ms.
type slowLease struct{ plainLease }

func (slowLease) Validity() driver.Validity {
	return driver.Validity{Sent: time.Now(), TTL: DefaultTTL}
}

type slowBackend struct{}

func (slowBackend) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	return slowLease{plainLease{1}}, nil
}

func (slowLease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	sent := time.Now()
	if _, ok := ctx.Deadline(); ok {
		time.Sleep(100 * time.Millisecond)
	}
	return driver.Validity{Sent: sent, TTL: ttl}, nil
}

// Lock.Refresh while the watchdog's refresh of the same lock is under way:
// no data race on the deadline (-race). (From review.)
func TestRefreshDuringWatchdogRefresh(t *testing.T) {
	ctx := context.Background()
	c, err := New(slowBackend{}, WithRenewal(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	l, err := c.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the watchdog's refresh is usually under way
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	l.Release(ctx)
}

// A released reentrant handle reports ErrReleased, while the handle still
// held reports nil.
func TestReleasedHandleErr(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, outer := oneLock(t)
		inner, err := c.Acquire(outer.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := inner.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := inner.Err(); !errors.Is(err, ErrReleased) {
			t.Errorf("released handle: Err %v, want ErrReleased", err)
		}
		if err := outer.Err(); err != nil {
			t.Errorf("the handle still held: Err %v", err)
		}
		outer.Release(ctx)
	})
}

// After a pause past MaxHold, Err reports the lock lost before the
// watchdog has run, as for a passed deadline; Deadline agrees. (From
// review.)
func TestErrAtMaxHoldBeforeWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := oneClient(t)
		l, err := c.Acquire(context.Background(), "k", WithMaxHold(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		l.g.maxUntil.Store(untilOf(time.Now().Add(-time.Nanosecond))) // the pause
		c.mu.Unlock()
		if l.Context().Err() != nil {
			t.Fatal("the watchdog ran: the test shows nothing")
		}
		if err := l.Err(); !errors.Is(err, ErrMaxHoldExceeded) || !errors.Is(err, ErrLockLost) {
			t.Errorf("MaxHold passed, watchdog not yet run: Err %v, want ErrMaxHoldExceeded", err)
		}
		if _, ok := l.Deadline(); ok {
			t.Error("Deadline ok for a lock Err reports lost")
		}
		l.Release(context.Background())
	})
}

// A reentrant Acquire of a lock that Err reports lost (its deadline passed,
// the watchdog not yet run) fails instead of handing out a dead handle.
// (From review.)
func TestReenterAfterDeadlinePassed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, l := oneLock(t)
		passDeadline(c, l.g)
		l2, err := c.Acquire(l.Context(), "k")
		if err == nil {
			t.Errorf("reentrant Acquire of a lock Err reports lost succeeded (its Err: %v)", l2.Err())
			l2.Release(context.Background())
		} else if !errors.Is(err, ErrNotAcquired) || !errors.Is(err, ErrDeadlinePassed) {
			t.Errorf("reentrant Acquire: %v, want ErrNotAcquired and ErrDeadlinePassed", err)
		}
		l.Release(context.Background())
	})
}

// The end of MaxHold that Acquire records is the one Err checks, inside a
// testing/synctest bubble too (whose clock reads before the package's
// epoch): an hour after the grant, Err reports it.
func TestMaxHoldRecordedForErr(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := oneClient(t)
		l, err := c.Acquire(context.Background(), "k", WithMaxHold(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Hour + time.Nanosecond).Sub(epoch).Nanoseconds()
		if err := l.g.errAt(later); !errors.Is(err, ErrMaxHoldExceeded) {
			t.Errorf("an hour after the grant: %v, want ErrMaxHoldExceeded", err)
		}
		if err := l.Err(); err != nil {
			t.Errorf("now: %v", err)
		}
		l.Release(context.Background())
	})
}

// A key is not reentered through the context of a lock whose deadline has
// passed, even before the watchdog has cancelled that context.
func TestNoReentryThroughEndedLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := oneClient(t)
		a, _ := c.Acquire(ctx, "a")
		b, err := c.Acquire(a.Context(), "b")
		if err != nil {
			t.Fatal(err)
		}
		passDeadline(c, b.g)
		if b.Context().Err() != nil {
			t.Fatal("the watchdog ran: the test shows nothing")
		}
		if l, err := c.Acquire(b.Context(), "a"); !errors.Is(err, ErrDeadlinePassed) {
			t.Errorf("reentry of a through b, whose deadline passed: %v, want ErrDeadlinePassed", err)
			if l != nil {
				l.Release(ctx)
			}
		}
		a.Release(ctx)
		b.Release(ctx)
	})
}
