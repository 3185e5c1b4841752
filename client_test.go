package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/memlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newClient(t *testing.T, b distlock.Backend, opts ...distlock.Option) *distlock.Client {
	t.Helper()
	c, err := distlock.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// The local deadline is sent + TTL*(1-drift) - margin, on the monotonic
// clock, and renewals that the service confirms move it.
func TestDeadlineArithmetic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := distlocktest.NewFaulty(memlock.New())
		c := newClient(t, f, distlock.WithTTL(10*time.Second), distlock.WithDrift(0.01),
			distlock.WithSafetyMargin(10*time.Millisecond), distlock.WithRenewEvery(3*time.Second))
		start := time.Now()
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		want := start.Add(9890 * time.Millisecond)
		if d, ok := l.Deadline(); !ok || !d.Equal(want) {
			t.Fatalf("Deadline() = %v, %v; want %v", d, ok, want)
		}
		time.Sleep(20 * time.Second) // six renewals
		if l.Err() != nil {
			t.Fatalf("renewed lock ended: %v", l.Err())
		}
		d, _ := l.Deadline()
		lastRenewal := start.Add(18 * time.Second)
		if !d.Equal(lastRenewal.Add(9890 * time.Millisecond)) {
			t.Fatalf("Deadline() after renewals = +%v, want +%v", d.Sub(start), lastRenewal.Add(9890*time.Millisecond).Sub(start))
		}
		f.Partition()
		<-l.Done()
		if got := time.Since(start); got != 18*time.Second+9890*time.Millisecond {
			t.Errorf("lost at +%v, want +27.89s (last confirmed renewal + 9.89s)", got)
		}
		if !errors.Is(l.Err(), distlock.ErrDeadlinePassed) || !errors.Is(l.Err(), distlock.ErrLockLost) {
			t.Errorf("Err() = %v, want ErrDeadlinePassed", l.Err())
		}
		if f.Refused() < 3 {
			t.Errorf("%d refreshes refused; the watchdog should keep trying until the deadline", f.Refused())
		}
	})
}

// The watchdog sleeps until its next event and is woken only for an
// earlier one. After a long lock is released, its timer is still set for
// that lock's renewal; a later lock with a shorter lease must still be
// renewed in time, and so must one with a longer lease.
func TestWatchdogTimerAfterHeapEmptied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := distlocktest.NewFaulty(memlock.New())
		c := newClient(t, f, distlock.WithDrift(0), distlock.WithSafetyMargin(0))
		long, err := c.Acquire(ctx, "a", distlock.WithTTL(30*time.Second)) // renewal due at +10s
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the watchdog sleeps, its timer set for +10s
		if err := long.Release(ctx); err != nil {
			t.Fatal(err)
		}

		// Earlier than the timer: the watchdog must be woken, or the short
		// lock (renewal due at +1s) would lapse before it looked.
		short, err := c.Acquire(ctx, "b", distlock.WithTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Second)
		if short.Err() != nil {
			t.Fatalf("short lock ended: %v", short.Err())
		}
		f.Partition()
		start := time.Now()
		<-short.Done()
		if got := time.Since(start); got <= 0 || got > 3*time.Second {
			t.Errorf("short lock lost %v after the partition, want within its 3s lease", got)
		}
		f.Heal()

		// Later than the timer: no wake-up is needed, and the renewals
		// still happen.
		l, err := c.Acquire(ctx, "c", distlock.WithTTL(60*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Minute)
		if l.Err() != nil {
			t.Fatalf("renewed lock ended: %v", l.Err())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A loss reported by the service ends the lock at once.
func TestServiceReportedLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		c := newClient(t, srv)
		l, _ := c.Acquire(ctx, "k")
		srv.Revoke("k")
		synctest.Wait()
		select {
		case <-l.Done():
		default:
			t.Fatal("lock context live after the service revoked the grant")
		}
		if !errors.Is(l.Err(), distlock.ErrLockLost) {
			t.Errorf("Err() = %v", l.Err())
		}
	})
}

// MaxHold ends and releases a lock that keeps renewing.
func TestMaxHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		c := newClient(t, srv, distlock.WithTTL(time.Second))
		start := time.Now()
		l, _ := c.Acquire(ctx, "k", distlock.WithMaxHold(5*time.Second))
		<-l.Done()
		if got := time.Since(start); got != 5*time.Second {
			t.Errorf("ended at +%v, want +5s", got)
		}
		if !errors.Is(l.Err(), distlock.ErrMaxHoldExceeded) {
			t.Errorf("Err() = %v", l.Err())
		}
		synctest.Wait() // the background release
		if hs, _ := srv.List(ctx, ""); len(hs) != 0 {
			t.Errorf("key still held after MaxHold: %+v", hs)
		}
	})
}

// countingBackend counts batched refreshes; it adds nothing else.
type countingBackend struct {
	*memlock.Backend
	calls, leases atomic.Int64
}

func (b *countingBackend) RefreshAll(ctx context.Context, ls []distlock.Lease, ttl time.Duration) []distlock.RefreshResult {
	b.calls.Add(1)
	b.leases.Add(int64(len(ls)))
	return b.Backend.RefreshAll(ctx, ls, ttl)
}

// Holding 10,000 locks costs one goroutine, and renewals are batched.
func TestManyLocksOneWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &countingBackend{Backend: memlock.New()}
		c := newClient(t, b, distlock.WithTTL(15*time.Second))
		before := runtime.NumGoroutine()
		const n = 10_000
		locks := make([]*distlock.Lock, n)
		for i := range locks {
			l, err := c.Acquire(ctx, fmt.Sprintf("k/%d", i))
			if err != nil {
				t.Fatal(err)
			}
			locks[i] = l
			if i%1000 == 0 {
				time.Sleep(100 * time.Millisecond) // acquired over a second, not at one instant
			}
		}
		if g := runtime.NumGoroutine() - before; g > 2 {
			t.Errorf("%d goroutines for %d held locks", g, n)
		}
		time.Sleep(time.Minute)
		for _, l := range locks {
			if l.Err() != nil {
				t.Fatalf("lock %s lost: %v", l.Key(), l.Err())
			}
		}
		rounds := int64(time.Minute / 5 / time.Second)
		if got := b.leases.Load(); got < rounds*n*9/10 {
			t.Errorf("%d lease refreshes in a minute, want about %d", got, rounds*n)
		}
		if got := b.calls.Load(); got > rounds*3 {
			t.Errorf("%d refresh calls for %d rounds: renewals are not batched", got, rounds)
		}
		t.Logf("%d RefreshAll calls refreshed %d leases", b.calls.Load(), b.leases.Load())
		for _, l := range locks {
			l.Release(ctx)
		}
	})
}

// flaky fails the first n acquires with a transient error.
type flaky struct {
	distlock.Backend
	n atomic.Int64
}

func (f *flaky) Acquire(ctx context.Context, key string, o distlock.AcquireOptions) (distlock.Lease, error) {
	if f.n.Add(-1) >= 0 {
		return nil, fmt.Errorf("%w: flaky", distlock.ErrUnavailable)
	}
	return f.Backend.Acquire(ctx, key, o)
}

func TestTransientErrorsAreRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := &flaky{Backend: memlock.New()}
		f.n.Store(3)
		c := newClient(t, f)
		if _, err := c.Acquire(ctx, "k"); err != nil {
			t.Fatalf("Acquire with 3 transient failures: %v", err)
		}
		f.n.Store(3)
		_, err := c.Acquire(ctx, "k2", distlock.WithRetry(distlock.NoRetry))
		if !errors.Is(err, distlock.ErrUnavailable) {
			t.Fatalf("NoRetry: %v, want ErrUnavailable", err)
		}
		f.n.Store(100)
		_, err = c.Acquire(ctx, "k3", distlock.WithRetry(distlock.Limit(distlock.ExponentialBackoff(time.Second, time.Second), 5)))
		if !errors.Is(err, distlock.ErrUnavailable) || f.n.Load() != 100-6 {
			t.Fatalf("Limit(5): %v after %d attempts, want ErrUnavailable after 6", err, 100-f.n.Load())
		}
	})
}

// slow confirms grants only after the usable part of their TTL.
type slow struct{ distlock.Backend }

func (s slow) Acquire(ctx context.Context, key string, o distlock.AcquireOptions) (distlock.Lease, error) {
	l, err := s.Backend.Acquire(ctx, key, o)
	time.Sleep(o.TTL)
	return l, err
}

// A grant confirmed too late to be usable is never handed out, and is given
// back.
func TestLateGrantIsGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		c := newClient(t, slow{srv}, distlock.WithTTL(time.Second), distlock.WithRetry(distlock.NoRetry))
		_, err := c.Acquire(ctx, "k")
		if !errors.Is(err, distlock.ErrUnavailable) || !strings.Contains(err.Error(), "usable validity") {
			t.Fatalf("Acquire with a late confirmation: %v", err)
		}
		synctest.Wait()
		if _, err := srv.Acquire(ctx, "k", distlock.AcquireOptions{TTL: time.Second}); err != nil {
			t.Fatalf("the late grant was left behind: %v", err)
		}
	})
}

// A lock acquired under another lock's context ends with it.
func TestNestedLockEndsWithOuter(t *testing.T) {
	for _, end := range []string{"lost", "released"} {
		t.Run(end, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				srv := memlock.New()
				c := newClient(t, srv)
				outer, _ := c.Acquire(ctx, "a")
				inner, _ := c.Acquire(outer.Context(), "b")
				if end == "lost" {
					srv.Revoke("a")
				} else {
					outer.Release(ctx)
				}
				synctest.Wait()
				if inner.Context().Err() == nil {
					t.Fatal("inner context live after the outer lock ended")
				}
				// The inner lock is still held: its Err says why its
				// context ended, not that it was lost or released.
				err := inner.Err()
				e, ok := errors.AsType[*distlock.EnclosingError](err)
				if !ok || e.Key != "a" || errors.Is(err, distlock.ErrLockLost) || errors.Is(err, distlock.ErrReleased) {
					t.Fatalf("inner Err() = %v after the outer lock was %s, want an EnclosingError naming a", err, end)
				}
				if cause := context.Cause(inner.Context()); cause != err {
					t.Errorf("inner context's cause %v, Err %v", cause, err)
				}
				if _, err := srv.Acquire(ctx, "b", distlock.AcquireOptions{TTL: time.Second}); !errors.Is(err, distlock.ErrNotAcquired) {
					t.Fatalf("inner key free while its lock is not released: %v", err)
				}
				if err := inner.Release(ctx); err != nil {
					t.Errorf("inner Release: %v", err)
				}
				if _, err := srv.Acquire(ctx, "b", distlock.AcquireOptions{TTL: time.Second}); err != nil {
					t.Errorf("inner key not freed: %v", err)
				}
			})
		})
	}
}

// Releasing with the lock's own context (cancelled by the release itself)
// still gives the key back.
func TestReleaseWithOwnContext(t *testing.T) {
	ctx := context.Background()
	srv := memlock.New()
	c := newClient(t, srv)
	l, _ := c.Acquire(ctx, "k")
	if err := l.Release(l.Context()); err != nil {
		t.Fatalf("Release(l.Context()): %v", err)
	}
	if _, err := srv.Acquire(ctx, "k", distlock.AcquireOptions{TTL: time.Second}); err != nil {
		t.Fatalf("key not freed: %v", err)
	}
}

// Users can test their own expiry handling without sleeping: memlock and
// the Client run on synctest's fake clock.
func TestExpiryUnderSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		a := newClient(t, srv, distlock.WithTTL(time.Hour), distlock.WithoutRenewal())
		b := newClient(t, srv)
		la, _ := a.Acquire(ctx, "k")
		start := time.Now()
		lb, err := b.Acquire(ctx, "k") // waits an hour of fake time
		if err != nil {
			t.Fatal(err)
		}
		if la.Err() == nil {
			t.Fatal("the first holder's context was live when the second was granted")
		}
		t.Logf("second holder served after %v (fake)", time.Since(start))
		lb.Release(ctx)
	})
}

func TestRetryStrategies(t *testing.T) {
	exp := distlock.ExponentialBackoff(10*time.Millisecond, time.Second)
	for n := 1; n < 200; n++ {
		d, ok := exp.Backoff(n)
		ceiling := time.Second
		if n < 8 {
			ceiling = min(time.Second, 10*time.Millisecond<<(n-1))
		}
		if !ok || d <= 0 || d > ceiling {
			t.Fatalf("exponential Backoff(%d) = %v, %v; want (0, %v]", n, d, ok, ceiling)
		}
	}
	lim := distlock.Limit(exp, 2)
	if _, ok := lim.Backoff(2); !ok {
		t.Error("Limit(2) stopped at the 2nd retry")
	}
	if _, ok := lim.Backoff(3); ok {
		t.Error("Limit(2) allowed a 3rd retry")
	}
	if _, ok := distlock.NoRetry.Backoff(1); ok {
		t.Error("NoRetry retried")
	}
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"a", "a/b", "../x", "ключ", "🔒", strings.Repeat("x", distlock.MaxKeyLen)} {
		if err := distlock.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", strings.Repeat("x", distlock.MaxKeyLen+1), "a\x00", "\t", "\xff", "a\u0085b"} {
		if err := distlock.ValidateKey(k); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}
