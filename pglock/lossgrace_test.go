package pglock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// The loss grace counts from the loss where the server knows when that
// was: a grant held when the server went down ended by the time it
// started again. The first grant after a restart still waits until the
// grace has passed since the start (checked by the server's clock), and a
// grant that comes later than that does not wait at all (it waited the
// whole grace when the grace counted from the grant).
func TestLossGraceCountsFromServerStart(t *testing.T) {
	const grace = 4 * time.Second
	ctx, key := testCtx(t), "grace/"+t.Name()
	srv := testserver.StartPostgres(t)
	b := newBackend(t, srv, pglock.WithLossGrace(grace))
	pool := newPool(t, srv)

	// crash holds key, crashes the server and restarts it.
	crash := func() {
		t.Helper()
		lost := make(chan error, 1)
		acquire(t, b, ctx, key, driver.AcquireOptions{OnLost: func(err error) { lost <- err }})
		srv.Kill()
		select {
		case err := <-lost:
			if !errors.Is(err, distlock.ErrLockLost) {
				t.Fatalf("OnLost(%v), want ErrLockLost", err)
			}
		case <-ctx.Done():
			t.Fatal("the lock held while the server crashed was not reported lost")
		}
		srv.Restart(t)
	}
	// grant acquires key once the server answers again, and returns how
	// long the Acquire that got it took.
	grant := func() (driver.Lease, time.Duration) {
		t.Helper()
		for {
			start := time.Now()
			l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
			if errors.Is(err, distlock.ErrUnavailable) && ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond) // the pool's connections from before the crash are failing
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			return l, time.Since(start)
		}
	}
	// sinceStart is how long the server has been up, by its clock, and
	// how long after its start key was last granted.
	sinceStart := func() (up, granted time.Duration) {
		t.Helper()
		for {
			err := pool.QueryRow(ctx, `SELECT clock_timestamp() - pg_postmaster_start_time(),
				coalesce((SELECT granted_at FROM distlock_fence WHERE key = $1), 'epoch') - pg_postmaster_start_time()`, key).Scan(&up, &granted)
			if err == nil {
				return up, granted
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // the pool's connections from before the crash are failing
		}
	}

	crash()
	l, _ := grant()
	if _, granted := sinceStart(); granted < grace {
		t.Errorf("granted %v after the server started, before the loss grace (%v) had passed", granted, grace)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	crash()
	for up, _ := sinceStart(); up <= grace; up, _ = sinceStart() {
		time.Sleep(100 * time.Millisecond) // the server's clock, polled
	}
	l, took := grant()
	if took >= grace {
		t.Errorf("a grant %v after the restart waited %v: the grace counted from the grant, not from the loss", grace, took)
	}
	l.Release(context.WithoutCancel(ctx))
}
