package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newClient(t *testing.T, b driver.Backend, opts ...distlock.Option) *distlock.Client {
	t.Helper()
	c, err := distlock.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// inBubble runs f in a synctest bubble (a fake clock) with an in-memory
// service and a Client over it, closed when f returns.
func inBubble(t *testing.T, f func(t *testing.T, srv *memlock.Backend, c *distlock.Client), opts ...distlock.Option) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		srv := memlock.New()
		f(t, srv, newClient(t, srv, opts...))
	})
}

// The local deadline is sent + TTL*(1-drift) - margin, on the monotonic
// clock, and renewals that the service confirms move it.
func TestDeadlineArithmetic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := distlocktest.NewFaulty(memlock.New())
		c := newClient(t, f, distlock.WithTTL(10*time.Second), distlock.WithDrift(0.01),
			distlock.WithSafetyMargin(10*time.Millisecond), distlock.WithRenewal(3*time.Second))
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

// A loss reported by the service ends the lock at once.
func TestServiceReportedLoss(t *testing.T) {
	inBubble(t, func(t *testing.T, srv *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
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

// flaky fails the first n acquires with a transient error.
type flaky struct {
	driver.Backend
	n atomic.Int64
}

func (f *flaky) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
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
type slow struct{ driver.Backend }

func (s slow) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
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
		if _, err := srv.Acquire(ctx, "k", driver.AcquireOptions{TTL: time.Second}); err != nil {
			t.Fatalf("the late grant was left behind: %v", err)
		}
	})
}

// Users can test their own expiry handling without sleeping: memlock and
// the Client run on synctest's fake clock.
func TestExpiryUnderSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		a := newClient(t, srv, distlock.WithTTL(time.Hour), distlock.WithRenewal(distlock.NoRenewal))
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
		synctest.Wait() // the Acquire returns (its goroutine is the caller's, not the Client's)
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

// stuckBackend is a Backend whose Acquire holds on until its context ends:
// a service that does not answer. It reports the cause it saw, and that of
// a context derived from the one it was given (as a client library derives
// one per request).
type stuckBackend struct {
	entered chan struct{}
	causes  chan [2]error
}

func (b *stuckBackend) Acquire(ctx context.Context, _ string, _ driver.AcquireOptions) (driver.Lease, error) {
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	b.entered <- struct{}{}
	<-derived.Done()
	b.causes <- [2]error{context.Cause(ctx), context.Cause(derived)}
	return nil, ctx.Err()
}

type stuckKey struct{}

// Close ends an acquisition that the backend is working on, waiting or
// not, whether the caller's context can end or not, with ErrClosed as the
// cause the backend sees.
func TestCloseEndsAcquireInBackend(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"never ends", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"with values", func() (context.Context, context.CancelFunc) {
			return context.WithValue(context.Background(), stuckKey{}, "v"), func() {}
		}},
		{"can end", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	} {
		for _, wait := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/wait=%v", tc.name, wait), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := &stuckBackend{entered: make(chan struct{}, 1), causes: make(chan [2]error, 1)}
					c, err := distlock.New(b)
					if err != nil {
						t.Fatal(err)
					}
					ctx, cancel := tc.ctx()
					defer cancel()
					errc := make(chan error, 1)
					go func() {
						_, err := c.Acquire(ctx, "k", distlock.WithWait(wait))
						errc <- err
					}()
					<-b.entered
					if err := c.Close(context.Background()); err != nil {
						t.Fatal(err)
					}
					if err := <-errc; !errors.Is(err, distlock.ErrClosed) {
						t.Errorf("Acquire ended with %v, want ErrClosed", err)
					}
					for i, cause := range <-b.causes {
						if cause != distlock.ErrClosed {
							t.Errorf("the backend's context (%d: 0 given, 1 derived) ended with cause %v, want ErrClosed", i, cause)
						}
					}
				})
			})
		}
	}
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
	if _, err := distlock.New(memlock.New(), distlock.WithRenewal(time.Nanosecond)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("WithRenewal(1ns): %v, want ErrInvalidOption", err)
	}
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
