package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
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

// An acquire whose Backend closes between the listing that shows its node
// first and the grant fails with ErrClosed, never with a node "deleted"
// by a session nobody ended: Close ends the session in the same step as
// it stops being current, so an acquire that finds no current session
// finds the cause too. Each round closes the Backend from the hook and
// lets the grant go on once the session is no longer current.
func TestAcquireAsBackendClosesFailsWithErrClosed(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	ctx := testCtx(t)
	for i := range 20 {
		key := fmt.Sprintf("wait/%s/%d", t.Name(), i)
		b := newBackend(t, z.Servers)
		closed := make(chan struct{})
		b.SetBeforeGrant(func(string) {
			go func() {
				b.Close()
				close(closed)
			}()
			deadline := time.Now().Add(time.Minute)
			for b.Current() {
				if time.Now().After(deadline) {
					t.Error("the session was still current a minute after Close")
					return
				}
				runtime.Gosched()
			}
		})
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			l.Release(ctx)
		}
		if !errors.Is(err, zklock.ErrClosed) {
			t.Fatalf("round %d: Acquire as the Backend closed: %v, want ErrClosed", i, err)
		}
		<-closed
	}
}
