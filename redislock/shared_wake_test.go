package redislock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// pushed bounds the time from a release to the grant it hands over: far
// below the waiters' poll (a third of a 30s liveness, or a one-minute
// TTL), generous for a loaded machine.
const pushed = 2 * time.Second

// waitQueued waits until key's waiter queue holds n waiters.
func waitQueued(t *testing.T, addr, key string, n int64) {
	t.Helper()
	rdb := newClient(t, addr)
	queue := redislock.DefaultPrefix + redislock.HashTag(key) + ":queue"
	eventually(t, time.Minute, "the waiter queued", func() bool {
		c, err := rdb.ZCard(testCtx(t), queue).Result()
		return err == nil && c == n
	})
}

// acquired is the outcome of an acquire run in a goroutine, and when it
// returned.
type acquired struct {
	l   driver.Lease
	err error
	at  time.Time
}

func goAcquire(f func() (driver.Lease, error)) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := f()
		ch <- acquired{l, err, time.Now()}
	}()
	return ch
}

// The last reader's release hands the key to a waiting writer, and a
// Watch of the key reports that writer at once. (The release handed the
// key over without announcing it: the watch never saw the writer.)
func TestSharedReleaseHandOffWatched(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	const key = "shared/watched"
	c, err := distlock.New(newBackend(t, srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := c.Watch(wctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if h := <-w; h.Token != 0 {
		t.Fatalf("first state of a free key: %+v", h)
	}
	b := newBackend(t, srv.Addr, redislock.WithWaiterLiveness(30*time.Second))
	r, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := goAcquire(func() (driver.Lease, error) {
		return b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	})
	waitQueued(t, srv.Addr, key, 1)
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.l.Release(ctx)
	// A watch re-reads at the latest when its marker's re-mark (a third
	// of 30s) finds the marker gone; nothing else would show the writer.
	deadline := time.After(20 * time.Second)
	for {
		select {
		case h := <-w:
			if h.Token == a.l.Token() {
				return
			}
		case <-deadline:
			t.Fatalf("the watch never reported the writer (token %d) the reader's release handed the key to", a.l.Token())
		}
	}
}

// A release hands the key to the waiters at once: the last reader's to a
// waiting writer, a writer's to a waiting reader, each well before the
// waiter's own poll would find it free. (Without the hand-off, a waiter
// is granted at its next poll, a third of its liveness later.)
func TestSharedReleaseHandsOff(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	b := newBackend(t, srv.Addr, redislock.WithWaiterLiveness(30*time.Second))
	for _, tc := range []struct {
		name             string
		holdShared, wait bool
	}{
		{"reader to writer", true, false},
		{"writer to reader", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "shared/handoff/" + tc.name
			acquire := func(shared, wait bool) (driver.Lease, error) {
				o := driver.AcquireOptions{TTL: time.Minute, Wait: wait}
				if shared {
					return b.AcquireShared(ctx, key, o)
				}
				return b.Acquire(ctx, key, o)
			}
			h, err := acquire(tc.holdShared, false)
			if err != nil {
				t.Fatal(err)
			}
			got := goAcquire(func() (driver.Lease, error) { return acquire(tc.wait, true) })
			waitQueued(t, srv.Addr, key, 1)
			released := time.Now()
			if err := h.Release(ctx); err != nil {
				t.Fatal(err)
			}
			a := <-got
			if a.err != nil {
				t.Fatal(a.err)
			}
			defer a.l.Release(ctx)
			if d := a.at.Sub(released); d > pushed {
				t.Errorf("the waiter was granted %v after the release; want a hand-off within %v", d, pushed)
			}
			if a.l.Token() <= h.Token() {
				t.Errorf("the waiter's token %d is not above the holder's %d", a.l.Token(), h.Token())
			}
		})
	}
}

// A WithUnordered writer waiting on readers is woken when the last of
// them releases, not when the first reader's TTL would have run out.
// (It slept until then: nothing was published on the key's channel.)
func TestSharedReleaseWakesUnorderedWriter(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	const key = "shared/unordered-wake"
	ordered := newBackend(t, srv.Addr)
	unordered := newBackend(t, srv.Addr, redislock.WithUnordered())
	var once sync.Once
	sleeping := make(chan struct{})
	redislock.SetWaitHooks(unordered, nil, func() { once.Do(func() { close(sleeping) }) })
	r1, err := ordered.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := ordered.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := goAcquire(func() (driver.Lease, error) {
		return unordered.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	})
	<-sleeping
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.l.Release(ctx)
	if d := a.at.Sub(released); d > pushed {
		t.Errorf("the unordered writer was granted %v after the last reader's release; want it woken within %v", d, pushed)
	}
	if a.l.Token() <= r2.Token() {
		t.Errorf("the writer's token %d is not above the reader's %d", a.l.Token(), r2.Token())
	}
}
