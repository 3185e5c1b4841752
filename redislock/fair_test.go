package redislock_test

import (
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
// the queue, and a waiter whose process died is skipped after its liveness
// lapses.
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

func TestFairDeadWaiterIsSkipped(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	const liveness = 500 * time.Millisecond
	key := "fair-dead-waiter"
	opts := []redislock.Option{redislock.WithWaiterLiveness(liveness)}
	holder := newBackend(t, srv.Addr, opts...)
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	// The first waiter's process dies: its connection closes under it, so
	// it cannot leave the queue.
	deadClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	dead := mustNew(t, deadClient, opts...)
	deadErr := make(chan error, 1)
	go func() {
		_, err := dead.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		deadErr <- err
	}()
	eventually(t, 10*time.Second, "dead waiter queued", func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == 1 })
	deadID := admin.ZRange(ctx, queueKey(key), 0, 0).Val()[0]
	deadClient.Close()
	if err := <-deadErr; err == nil {
		t.Fatal("the dead waiter's Acquire succeeded")
	}
	dead.Close()
	if _, err := admin.ZScore(ctx, queueKey(key), deadID).Result(); err != nil {
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
	eventually(t, 10*time.Second, "live waiter queued behind the dead one", func() bool {
		q := admin.ZRange(ctx, queueKey(key), 0, -1).Val()
		return len(q) == 2 && q[0] == deadID
	})
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("live waiter: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("live waiter not served 30s after the release; the dead waiter's liveness is %v", liveness)
	}
	if _, err := admin.ZScore(ctx, queueKey(key), deadID).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("dead waiter still queued: %v", err)
	}
}
