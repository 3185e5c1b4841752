package distlock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A lock whose renewals fail is at risk from exactly its deadline less the
// window, before its context is cancelled at the deadline; a renewal that
// succeeds afterwards re-arms it; a healthy lock is never at risk.
func TestAtRisk(t *testing.T) {
	const ttl = 3 * time.Second
	// usable: 3s*0.99 - 10ms = 2.96s; renewals every 1s; the window is
	// min(TTL/3, (2.96s-1s)/2) = 980ms.
	const usable, window = 2960 * time.Millisecond, 980 * time.Millisecond
	t.Run("healthy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			c := newClient(t, memlock.New(), distlock.WithTTL(ttl))
			l, _ := c.Acquire(ctx, "k")
			risk := l.AtRisk()
			for range 100 {
				time.Sleep(ttl / 10)
				synctest.Wait()
				if closed(risk) || closed(l.AtRisk()) {
					t.Fatal("a healthy lock is at risk")
				}
			}
			l.Release(ctx)
		})
	})
	t.Run("failing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			f := distlocktest.NewFaulty(memlock.New())
			c := newClient(t, f, distlock.WithTTL(ttl))
			start := time.Now()
			l, _ := c.Acquire(ctx, "k")
			f.Partition("k")
			risk := l.AtRisk()
			time.Sleep(usable - window - time.Millisecond)
			synctest.Wait()
			if closed(risk) {
				t.Fatalf("at risk %v after the grant, before the window", time.Since(start))
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if !closed(risk) {
				t.Fatalf("not at risk %v after the grant, %v before the deadline", time.Since(start), window)
			}
			if l.Context().Err() != nil || l.Err() != nil {
				t.Fatal("at risk only once the lock ended")
			}
			f.Heal() // the next retry is confirmed
			time.Sleep(window / 2)
			synctest.Wait()
			if l.Err() != nil {
				t.Fatalf("healed, the lock ended: %v", l.Err())
			}
			if again := l.AtRisk(); closed(again) || again == risk {
				t.Error("a confirmed renewal did not re-arm the at-risk signal")
			}
			f.Partition("k")
			risk = l.AtRisk()
			d, _ := l.Deadline()
			time.Sleep(time.Until(d) - window)
			synctest.Wait()
			if !closed(risk) || l.Context().Err() != nil {
				t.Errorf("second time: at risk %v, context %v", closed(risk), l.Context().Err())
			}
			time.Sleep(window)
			synctest.Wait()
			if l.Context().Err() == nil {
				t.Error("the deadline passed and the context is live")
			}
			l.Release(ctx)
		})
	})
}

// sessionBackend grants every lock for its session timeout, whatever TTL
// the Client asks for, as a session backend does (a ZooKeeper session
// timeout shorter than the Client's TTL): the leases are memlock's, asked
// for the session timeout, and their validity says so.
type sessionBackend struct {
	driver.Backend // memlock's, without its RefreshAll
	timeout        time.Duration
}

func (b sessionBackend) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	opts.TTL = b.timeout
	l, err := b.Backend.Acquire(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return sessionLease{l, b.timeout}, nil
}

type sessionLease struct {
	driver.Lease
	timeout time.Duration
}

func (l sessionLease) Refresh(ctx context.Context, _ time.Duration) (driver.Validity, error) {
	return l.Lease.Refresh(ctx, l.timeout)
}

// The at-risk window is measured on the lease the service confirmed, not
// on the TTL asked for: with a session of 4s under a TTL of 15s, the
// Client renews halfway to each deadline (every 1.975s), and the window is
// half the time left after that renewal; a healthy lock is never at risk,
// and a lock whose renewals fail is at risk at the window's start.
func TestAtRiskShortSession(t *testing.T) {
	const ttl, session = 15 * time.Second, 4 * time.Second
	// usable: 4s*0.99 - 10ms = 3.95s; the next renewal 1.975s after each
	// confirmation; the window min(TTL/3, 1.975s/2) = 987.5ms.
	const usable, window = 3950 * time.Millisecond, 987500 * time.Microsecond
	t.Run("healthy", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			c := newClient(t, sessionBackend{memlock.New(), session}, distlock.WithTTL(ttl))
			l, err := c.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			risk := l.AtRisk()
			for range 100 {
				time.Sleep(session / 10)
				synctest.Wait()
				if closed(risk) || closed(l.AtRisk()) || l.Err() != nil {
					t.Fatalf("a healthy lock is at risk (%v) or ended (%v)", closed(l.AtRisk()), l.Err())
				}
				d, w, ok := l.RiskWindow()
				if !ok || w != window || time.Until(d) <= w {
					t.Fatalf("RiskWindow() = +%v, %v, %v; want a deadline more than the window %v ahead", time.Until(d), w, ok, window)
				}
			}
			l.Release(ctx)
			if _, _, ok := l.RiskWindow(); ok {
				t.Error("RiskWindow() reports a window after the release")
			}
		})
	})
	t.Run("failing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			f := distlocktest.NewFaulty(sessionBackend{memlock.New(), session})
			c := newClient(t, f, distlock.WithTTL(ttl))
			l, err := c.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			f.Partition("k")
			risk := l.AtRisk()
			time.Sleep(usable - window - time.Millisecond)
			synctest.Wait()
			if closed(risk) {
				t.Fatal("at risk before the window")
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if !closed(risk) || l.Err() != nil {
				t.Fatalf("at the window's start: at risk %v, lock %v; want at risk and held", closed(risk), l.Err())
			}
			time.Sleep(window)
			synctest.Wait()
			if l.Context().Err() == nil {
				t.Error("the deadline passed and the context is live")
			}
			l.Release(ctx)
		})
	})
}
