package distlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/memlock"
)

// slowHandler takes d to write a record whose message contains match.
type slowHandler struct {
	match string
	d     time.Duration
}

func (h slowHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h slowHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		time.Sleep(h.d)
	}
	return nil
}
func (h slowHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h slowHandler) WithGroup(string) slog.Handler      { return h }

// A slow log handler must not delay the loss notice: contexts are cancelled
// before anything is logged.
func TestSlowLoggerDoesNotDelayLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		a := newClient(t, srv, distlock.WithTTL(time.Second), distlock.WithoutRenewal(),
			distlock.WithLogger(slog.New(slowHandler{"lock lost", 5 * time.Second})))
		b := newClient(t, srv)
		la, _ := a.Acquire(ctx, "k")
		lb, err := b.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer lb.Release(ctx)
		select {
		case <-la.Done():
		default:
			t.Fatal("key granted to B while A's context is live")
		}
	})
}

// A slow log handler must not block the watchdog: refresh failures are
// logged outside the Client's lock.
func TestSlowLoggerDoesNotBlockWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		f := distlocktest.NewFaulty(srv)
		a := newClient(t, f, distlock.WithTTL(300*time.Millisecond),
			distlock.WithLogger(slog.New(slowHandler{"refresh failed", time.Hour})))
		b := newClient(t, srv)
		la, _ := a.Acquire(ctx, "k")
		f.Partition()
		lb, err := b.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer lb.Release(ctx)
		select {
		case <-la.Done():
		default:
			t.Fatal("key granted to B while A's context is live: the watchdog was blocked")
		}
	})
}

// slowGrant confirms grants late and counts refreshes.
type slowGrant struct {
	*memlock.Backend
	d         time.Duration
	refreshes atomic.Int64
}

func (s *slowGrant) Acquire(ctx context.Context, key string, o distlock.AcquireOptions) (distlock.Lease, error) {
	l, err := s.Backend.Acquire(ctx, key, o)
	time.Sleep(s.d)
	return l, err
}

func (s *slowGrant) RefreshAll(ctx context.Context, ls []distlock.Lease, ttl time.Duration) []distlock.RefreshResult {
	s.refreshes.Add(int64(len(ls)))
	return s.Backend.RefreshAll(ctx, ls, ttl)
}

// A grant confirmed late is renewed before its deadline, not one full
// interval later.
func TestLateGrantIsRenewedInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &slowGrant{Backend: memlock.New(), d: 2200 * time.Millisecond}
		c := newClient(t, b, distlock.WithTTL(3*time.Second))
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if l.Err() != nil {
			t.Errorf("lock lost after %d refreshes: %v", b.refreshes.Load(), l.Err())
		}
	})
}

// slowRelease: the release reply takes 50ms, and honours ctx.
type slowRelease struct{ *memlock.Backend }
type slowReleaseLease struct{ distlock.Lease }

func (s slowRelease) Acquire(ctx context.Context, key string, o distlock.AcquireOptions) (distlock.Lease, error) {
	l, err := s.Backend.Acquire(ctx, key, o)
	if err != nil {
		return nil, err
	}
	return slowReleaseLease{l}, nil
}

func (l slowReleaseLease) Release(ctx context.Context) error {
	select {
	case <-time.After(50 * time.Millisecond):
		return l.Lease.Release(context.Background())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A release whose context ends mid-call is finished in the background.
func TestReleaseCutShortIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memlock.New()
		c, _ := distlock.New(slowRelease{srv})
		l, err := c.Acquire(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if err := l.Release(ctx); err == nil {
			t.Error("a release cut short reported success")
		}
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		if hs, _ := srv.List(context.Background(), ""); len(hs) != 0 {
			t.Errorf("after Release and Close the key is still held: %+v", hs)
		}
	})
}

// Close ends an Acquire that is waiting, and waits for it.
func TestCloseEndsWaitingAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		a := newClient(t, srv)
		b, _ := distlock.New(srv)
		la, _ := a.Acquire(ctx, "k")
		errc := make(chan error, 1)
		go func() { _, err := b.Acquire(ctx, "k"); errc <- err }()
		synctest.Wait()
		if err := b.Close(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, distlock.ErrClosed) {
				t.Errorf("waiting Acquire ended with %v, want ErrClosed", err)
			}
		default:
			t.Fatal("Close returned while an Acquire was still waiting")
		}
		la.Release(ctx)
	})
}

// Close racing a nested Acquire: no data race, nothing left behind.
func TestCloseRacesNestedAcquire(t *testing.T) {
	ctx := context.Background()
	for i := range 200 {
		srv := memlock.New()
		c, _ := distlock.New(srv)
		outer, err := c.Acquire(ctx, "outer")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			if l, err := c.Acquire(outer.Context(), "inner"); err == nil {
				l.Release(ctx)
			}
		})
		wg.Go(func() {
			for range i % 7 {
				_ = outer.Token()
			}
			c.Close(ctx)
		})
		wg.Wait()
		c.Close(ctx)
		if hs, _ := srv.List(ctx, ""); len(hs) != 0 {
			t.Fatalf("round %d: left behind: %+v", i, hs)
		}
	}
}

// Acquire through a cancelled context fails, reentrant or not, with an
// error matching ErrNotAcquired and ctx.Err().
func TestReentrantAcquireHonoursContext(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memlock.New())
	l, _ := c.Acquire(ctx, "k")
	dctx, cancel := context.WithCancel(l.Context())
	cancel()
	if l2, err := c.Acquire(dctx, "k"); err == nil {
		t.Errorf("reentrant Acquire with a cancelled context succeeded (token %d)", l2.Token())
		l2.Release(ctx)
	}
	l.Release(ctx)
	_, err := c.Acquire(l.Context(), "k")
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire through a released lock's context: %v", err)
	}
}

// A set's context ends in the same step as the part that was lost.
func TestSetEndsWithItsPart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		c := newClient(t, srv)
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

// Do releases the lock when fn panics.
func TestDoReleasesOnPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		c := newClient(t, srv, distlock.WithTTL(time.Second))
		func() {
			defer func() { recover() }()
			c.Do(ctx, "k", func(context.Context) error { panic("handler bug") })
		}()
		if hs, _ := srv.List(ctx, ""); len(hs) != 0 {
			t.Errorf("fn panicked and %q is still held", hs[0].Key)
		}
	})
}

// Cancellation causes do not hide ctx.Err().
func TestCauseKeepsContextError(t *testing.T) {
	c := newClient(t, memlock.New())
	shutdown := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(shutdown)
	_, err := c.Acquire(ctx, "k")
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) || !errors.Is(err, shutdown) {
		t.Errorf("cancelled with a cause: %v", err)
	}
	synctest.Test(t, func(t *testing.T) {
		f := &flaky{Backend: memlock.New()}
		f.n.Store(1000)
		c2 := newClient(t, f, distlock.WithRetry(distlock.ExponentialBackoff(time.Second, time.Second)))
		dctx, cancel2 := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, shutdown)
		defer cancel2()
		_, err = c2.Acquire(dctx, "k")
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("deadline with a cause while backing off: %v", err)
		}
	})
}

func TestTinyRenewIntervalRefused(t *testing.T) {
	if _, err := distlock.New(memlock.New(), distlock.WithRenewEvery(time.Nanosecond)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("WithRenewEvery(1ns): %v, want ErrInvalidOption", err)
	}
}

// A set with a key the caller already held (reentered, so not acquired
// under the set's other locks): the set's context still ends with every
// part, and carries every part for reentrant acquisition.
func TestSetWithHeldKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		c := newClient(t, srv)
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
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newClient(t, memlock.New())
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
