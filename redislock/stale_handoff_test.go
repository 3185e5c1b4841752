package redislock_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/redislock"
)

// A hand-off message that reaches the waiter late, after the grant it
// carries has expired and another client holds the key, is not a grant.
// Here the waiter's pub/sub connection goes through a proxy that delays it
// (its other connections go straight to the server): the release hands
// the waiter a short grant, the grant expires unnoticed, a second client
// takes the key, and the waiter's next try, which finds it held, refreshes
// its place in the queue. When the old message then arrives, the waiter
// must not take it for a grant timed from that newer refresh: the grant's
// validity would then end well after its expiry, while the second client
// holds the key. The waiter has to wait for the second client's release.
func TestLateHandOffMessageIsNotAGrant(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "late-hand-off"
	const delay = time.Second
	p := faultproxy.Start(t, srv.Addr)
	var viaProxy atomic.Bool // the next connection the waiter opens goes through p
	wc := newClient(t, srv.Addr, func(o *redis.Options) {
		o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if viaProxy.CompareAndSwap(true, false) {
				addr = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
	})
	// The waiter tries again every 100ms (a third of its liveness).
	live := redislock.WithWaiterLiveness(300 * time.Millisecond)
	holder, other := newBackend(t, srv.Addr, live), newBackend(t, srv.Addr, live)
	waiter := mustNew(t, wc, live)
	t.Cleanup(func() { waiter.Close() })

	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var (
		once   sync.Once
		lo     driver.Lease
		staged = make(chan struct{})
	)
	redislock.SetWaitHooks(waiter,
		func() { viaProxy.Store(true) }, // its pub/sub connection, opened next
		func() {
			once.Do(func() {
				defer close(staged)
				// Queued behind the holder and subscribed: from now on
				// what the server publishes reaches the waiter late.
				p.Delay(delay)
				if err := lh.Release(ctx); err != nil { // hands the waiter a 100ms grant
					t.Error(err)
					return
				}
				eventually(t, 10*time.Second, "the handed grant expired", func() bool {
					return admin.Exists(ctx, lockKey(key)).Val() == 0
				})
				var err error
				if lo, err = other.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); err != nil {
					t.Errorf("the key after the handed grant expired: %v", err)
				}
			})
		})

	type result struct {
		l   driver.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key, driver.AcquireOptions{TTL: 100 * time.Millisecond, Wait: true})
		got <- result{l, err}
	}()
	<-staged
	if lo == nil {
		t.FailNow()
	}
	check := func(r result) {
		t.Helper()
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		if r.l.Token() <= lo.Token() {
			v := r.l.Validity()
			t.Errorf("the waiter took the expired grant of token %d (valid for %v more by its validity) while token %d holds the key",
				r.l.Token(), time.Until(v.Sent.Add(v.TTL)), lo.Token())
		}
		r.l.Release(ctx)
	}
	// The late message arrives after delay; give it that three times over.
	select {
	case r := <-got:
		check(r)
		lo.Release(ctx)
		return
	case <-time.After(3 * delay):
	}
	if err := lo.Release(ctx); err != nil {
		t.Fatal(err)
	}
	check(<-got)
}
