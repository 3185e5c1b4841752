package redislock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// A queued waiter whose pub/sub connection breaks is not left waiting for
// its fallback timer: go-redis reconnects and subscribes again, and the
// confirmation makes the waiter try again. A release while it could not
// be heard served the next waiter: a reconnect can cost a waiter its
// place, not its wake-up. The liveness of a minute puts the fallback timer
// at 20s, past the test's deadline.
func TestPubSubReconnectWhileQueued(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "reconnect-queued"
	opts := []redislock.Option{redislock.WithWaiterLiveness(time.Minute)}
	holder := newBackend(t, srv.Addr, opts...)
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	granted := make(chan string, 2)
	var wg sync.WaitGroup
	defer wg.Wait() // the releases, before ctx ends
	wait := func(name string, b *redislock.Backend) {
		defer wg.Done()
		l, err := b.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("waiter %s: %v", name, err)
			granted <- ""
			return
		}
		granted <- name
		if err := l.Release(ctx); err != nil {
			t.Errorf("waiter %s: Release: %v", name, err)
		}
	}
	queued := func(n int64) func() bool {
		return func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == n }
	}

	proxy, pc := proxied(t, srv.Addr)
	a := mustNew(t, pc, opts...)
	t.Cleanup(func() { a.Close() })
	wg.Add(2)
	go wait("a", a)
	eventually(t, 10*time.Second, "waiter a queued", queued(1))
	go wait("b", newBackend(t, srv.Addr, opts...))
	eventually(t, 10*time.Second, "waiter b queued", queued(2))

	// Cut waiter a's connections and keep it from reconnecting while the
	// holder releases: the hand-off reaches nobody on a's channel.
	proxy.Blackhole()
	proxy.Reset()
	eventually(t, 10*time.Second, "waiter a's subscription gone", func() bool {
		return admin.PubSubNumSub(ctx, redislock.WakeChannel(a)).Val()[redislock.WakeChannel(a)] == 0
	})
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-granted; got != "b" {
		t.Fatalf("first grant after the release went to %q, want b (a could not be heard)", got)
	}
	proxy.Heal()
	if got := <-granted; got != "a" {
		t.Fatalf("second grant went to %q, want a once reconnected", got)
	}
}
