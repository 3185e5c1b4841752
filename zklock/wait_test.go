package zklock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// A waiter whose context ends as its Backend closes reports its context,
// as the waiters of every backend do (driver.Wait reports the end of ctx
// first): the caller asked for that end, and a Client that cancels its
// acquisitions when it closes gives the cause with the context.
func TestWaiterCancelledAsBackendCloses(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	ctx := testCtx(t)
	key := "wait/" + t.Name()
	hl, err := newBackend(t, z.Servers).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	w := newBackend(t, z.Servers)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	w.SetBeforeWatch(func(string) {
		once.Do(func() {
			cancel()
			w.Close()
		})
	})
	_, err = w.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("waiter Acquire, cancelled as its Backend closed: %v, want ErrNotAcquired and context.Canceled", err)
	}
	if err := hl.Release(ctx); err != nil {
		t.Fatalf("holder Release: %v", err)
	}
}
