package redislock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// A release hands the lock to the first waiter itself: the waiter's
// Acquire returns without a request of its own, and the validity it
// reports ends no later than the server's expiry of the handed grant,
// although the waiter sent nothing since it queued, long before the grant:
// the validity runs from when it sent its last refresh of its place, for
// the TTL plus the time the server counted since that refresh.
func TestHandOffGrantsTheWaiter(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "handed"
	const ttl = time.Minute
	const held = 1500 * time.Millisecond
	// No refresh of the waiter's place while the holder holds the key.
	opts := []redislock.Option{redislock.WithWaiterLiveness(time.Hour)}
	holder, waiter := newBackend(t, srv.Addr, opts...), newBackend(t, srv.Addr, opts...)
	lw, err := holder.Acquire(ctx, key+"/warm-up", driver.AcquireOptions{TTL: ttl}) // loads the scripts
	if err != nil {
		t.Fatal(err)
	}
	if err := lw.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	m := startMonitor(t, srv.Addr)
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key, driver.AcquireOptions{TTL: ttl, Wait: true})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == 1 })
	queuedAt := time.Now()
	time.Sleep(held) // the scenario: the holder works a while
	m.requests(t, admin)
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if reqs := m.requests(t, admin); len(reqs) != 1 || reqs[0] != "evalsha" {
		t.Errorf("requests from the release to the grant: %v, want the release's evalsha alone", reqs)
	}
	if l.Token() <= lh.Token() {
		t.Errorf("handed token %d after %d", l.Token(), lh.Token())
	}
	// The server's expiry, read as a time rather than as a PTTL (which
	// would tell it only up to the latency of the request): the server
	// runs on this host, so its Unix time is this process's wall clock.
	// It holds the key through the millisecond it names.
	at, err := admin.PExpireTime(ctx, lockKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	expiry := time.UnixMilli(at.Milliseconds() + 1)
	v := l.Validity()
	end := v.Sent.Add(v.TTL).Round(0) // wall clock, as expiry
	if end.After(expiry) {
		t.Errorf("the handed lease is valid until %v after the server's expiry", end.Sub(expiry))
	}
	// And it counts the time waited: from its queueing, the TTL alone would
	// end about held earlier.
	if v.Sent.After(queuedAt) || end.Before(expiry.Add(-held/2)) {
		t.Errorf("validity %v from %v ends %v before the server's expiry: the time waited is not counted", v.TTL, v.Sent, expiry.Sub(end))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
