package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// A closed Backend refuses Acquire, and wakes a waiting Acquire, with an
// error matching distlock.ErrClosed as every backend's does; its leases
// still release.
func TestClosedBackend(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "closed-backend"
	lh, err := newBackend(t, srv.Addr).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, srv.Addr)
	own, err := b.Acquire(ctx, key+"/own", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		waiting <- err
	}()
	eventually(t, 10*time.Second, "the waiter subscribed", func() bool {
		return admin.PubSubNumSub(ctx, redislock.WakeChannel(b)).Val()[redislock.WakeChannel(b)] == 1
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; !errors.Is(err, distlock.ErrClosed) || !errors.Is(err, redislock.ErrClosed) {
		t.Errorf("waiting Acquire at Close: %v, want a match for distlock.ErrClosed and redislock.ErrClosed", err)
	}
	for _, wait := range []bool{false, true} {
		if _, err := b.Acquire(ctx, key+"/after", driver.AcquireOptions{TTL: time.Minute, Wait: wait}); !errors.Is(err, distlock.ErrClosed) {
			t.Errorf("Acquire (wait %v) after Close: %v, want a match for distlock.ErrClosed", wait, err)
		}
	}
	if err := own.Release(ctx); err != nil {
		t.Errorf("Release of a lease after its Backend closed: %v", err)
	}
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
