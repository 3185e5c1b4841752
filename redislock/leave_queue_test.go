package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

// A waiter whose context ends leaves the queue, and releases the grant a
// release may have handed it meanwhile. When that request fails (here the
// waiter is cut off from the server while the hand-off happens and it
// gives up), the Backend retries it once the server answers again, as it
// does the clean-up of a failed try: the handed grant would otherwise keep
// the key for its whole TTL, held by nobody.
func TestLeaveQueueRetried(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	proxy, pc := proxied(t, srv.Addr)
	b := mustNew(t, pc)
	t.Cleanup(func() { b.Close() })
	key := "leave-queue-retried"
	holder := newBackend(t, srv.Addr)
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l, err := b.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			l.Release(ctx)
		}
		done <- err
	}()
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == 1 })
	proxy.Blackhole()
	if err := lh.Release(ctx); err != nil { // hands the key to the cut-off waiter
		t.Fatal(err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled waiter: %v, want context.Canceled", err)
	}
	proxy.Reset() // what was held in the network is lost
	proxy.Heal()
	eventually(t, 10*time.Second, "the key free again", func() bool { return admin.Exists(ctx, lockKey(key)).Val() == 0 })
}
