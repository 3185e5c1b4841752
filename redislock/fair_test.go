package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// Fair mode: waiters are served in arrival order, a newcomer cannot jump
// the queue, and a waiter whose process died is skipped.
func TestFairOrder(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	const n = 5
	key := "fair-order"
	var opts []redislock.Option
	holder := newBackend(t, srv.Addr, opts...)
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, n)
	proceed := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		b := newBackend(t, srv.Addr, opts...) // one process each
		wg.Go(func() {
			l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				order <- -1
				return
			}
			order <- i
			<-proceed
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d: Release: %v", i, err)
			}
		})
		eventually(t, 10*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool {
			return admin.ZCard(ctx, queueKey(key)).Val() == int64(i+1)
		})
	}
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The first waiter holds the key or is about to: a newcomer cannot
	// take it, although it may be free for a moment.
	newcomer := newBackend(t, srv.Addr, opts...)
	if l, err := newcomer.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			l.Release(ctx)
		}
		t.Errorf("newcomer's try while others queue: %v, want ErrNotAcquired", err)
	}
	for want := range n {
		if got := <-order; got != want {
			t.Errorf("grant %d went to waiter %d", want, got)
		}
		proceed <- struct{}{}
	}
	wg.Wait()
}

// A waiter whose Acquire ended with its connection closed under it (it
// could not leave the queue) stays first in line, its liveness an hour
// away: the release skips it because nobody hears its wake-up, long before
// its liveness would lapse. (With a liveness shorter than the test, a
// loaded machine lets it lapse before the live waiter queues behind it,
// and the test would not see the fault.)
func TestFairDeadWaiterIsSkipped(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	const liveness = time.Hour
	key := "fair-dead-waiter"
	opts := []redislock.Option{redislock.WithWaiterLiveness(liveness)}
	holder := newBackend(t, srv.Addr, opts...)
	// The holder's TTL outlasts the test's context too: a waiter that the
	// release did not wake would try again only when it lapsed.
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	// The first waiter's process dies: its connection closes under it, so
	// it cannot leave the queue.
	deadClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	dead := mustNew(t, deadClient, opts...)
	deadErr := make(chan error, 1)
	deadCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_, err := dead.Acquire(deadCtx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		deadErr <- err
	}()
	eventually(t, 10*time.Second, "dead waiter queued", func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == 1 })
	deadID := admin.ZRange(ctx, queueKey(key), 0, 0).Val()[0]
	deadClient.Close()
	stop() // it gives up, and cannot leave the queue
	if err := <-deadErr; err == nil {
		t.Fatal("the dead waiter's Acquire succeeded")
	}
	dead.Close()
	deadline, err := admin.ZScore(ctx, redislock.DefaultPrefix+redislock.HashTag(key)+":alive", deadID).Result()
	if err != nil {
		t.Fatalf("the dead waiter left the queue (%v): the fault did not bite", err)
	}

	live := newBackend(t, srv.Addr, opts...)
	got := make(chan error, 1)
	go func() {
		l, err := live.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 30*time.Second, "live waiter queued behind the dead one", func() bool {
		q := admin.ZRange(ctx, queueKey(key), 0, -1).Val()
		return len(q) == 2 && q[0] == deadID
	})
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The live waiter tries again only when the holder's TTL or its own
	// liveness runs out, both past the test's context: only the release
	// can have skipped the dead waiter and woken it.
	if err := <-got; err != nil {
		t.Fatalf("live waiter: %v", err)
	}
	if _, err := admin.ZScore(ctx, queueKey(key), deadID).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("dead waiter still queued: %v", err)
	}
	if now := admin.Time(ctx).Val(); float64(now.UnixMilli()) >= deadline {
		t.Errorf("the grant came after the dead waiter's liveness lapsed")
	}
}
