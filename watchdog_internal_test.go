package distlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock/driver"
)

// oneAtATime is a backend that grants every key at once with unbounded
// leases: enough to drive the Client's watchdog.
type oneAtATime struct{ tok uint64 }

type plainLease struct{ tok uint64 }

func (b *oneAtATime) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	b.tok++
	return plainLease{b.tok}, nil
}

func (l plainLease) Token() uint64 { return l.tok }
func (l plainLease) Validity() driver.Validity {
	return driver.Validity{Sent: time.Now(), TTL: time.Minute}
}
func (l plainLease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	return driver.Validity{Sent: time.Now(), TTL: ttl}, nil
}
func (l plainLease) Release(ctx context.Context) error { return nil }

// Locks taken one after another, 15ms apart for 1.5s, reuse the lingering
// watchdog goroutine; it exits exactly watchdogLinger after the last lock
// is released (its renewal timer, 100ms, being earlier), whichever
// goroutine ran first, and Close ends it at once.
func TestWatchdogLingers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, err := New(&oneAtATime{}, WithRenewal(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		starts := func() int {
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.wd.starts
		}
		running := func() bool {
			synctest.Wait()
			c.mu.Lock()
			defer c.mu.Unlock()
			return c.wd.running
		}
		for range 100 {
			l, err := c.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(15 * time.Millisecond)
		}
		if n := starts(); n != 1 {
			t.Errorf("%d watchdog goroutines started for 100 locks 15ms apart, want 1", n)
		}
		time.Sleep(watchdogLinger - 15*time.Millisecond - time.Millisecond)
		if !running() {
			t.Errorf("the watchdog stopped before %v had passed since the last lock", watchdogLinger)
		}
		time.Sleep(time.Millisecond)
		if running() {
			t.Errorf("the watchdog still runs %v after the last lock", watchdogLinger)
		}
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
		if n := starts(); n != 2 {
			t.Errorf("%d watchdog goroutines started, want 2 (one more after the idle second)", n)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		// Close returned: the watchdog has exited (synctest would report
		// a goroutine left behind in the bubble otherwise).
	})
}
