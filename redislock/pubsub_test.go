package redislock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// A release reaches a waiter through pub/sub long before the TTL would,
// and one Backend serves many waiters over one pub/sub connection.
func TestPubSubHandOff(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	const ttl = 2 * time.Minute
	const waiters = 16
	key := "handoff"
	holder, b := newBackend(t, srv.Addr), newBackend(t, srv.Addr)
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}

	wctx, cancel := context.WithTimeout(ctx, ttl/4)
	defer cancel()
	type grant struct {
		at    time.Time
		token uint64
		err   error
	}
	grants := make(chan grant, waiters)
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			l, err := b.Acquire(wctx, key, driver.AcquireOptions{TTL: ttl, Wait: true})
			if err != nil {
				grants <- grant{err: err}
				return
			}
			grants <- grant{at: time.Now(), token: l.Token()}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
	}

	// One subscription and one pub/sub connection for all the waiters.
	eventually(t, 10*time.Second, "waiters subscribed", func() bool {
		return admin.PubSubNumSub(ctx, redislock.WakeChannel(b)).Val()[redislock.WakeChannel(b)] == 1
	})
	if n := pubsubClients(t, admin); n != 1 {
		t.Errorf("%d pub/sub connections for %d waiters, want 1", n, waiters)
	}

	released := time.Now()
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	last := lh.Token()
	var latest time.Time
	for range waiters {
		g := <-grants
		if g.err != nil {
			t.Fatalf("waiter: %v", g.err)
		}
		if g.token <= lh.Token() {
			t.Errorf("token %d after %d", g.token, lh.Token())
		}
		last = max(last, g.token)
		latest = g.at
	}
	wg.Wait()
	if took := latest.Sub(released); took >= ttl/4 {
		t.Errorf("%d hand-offs took %v; the TTL is %v: waiters were not woken by the releases", waiters, took, ttl)
	} else {
		t.Logf("%d hand-offs in %v after the first release (TTL %v)", waiters, took, ttl)
	}
	eventually(t, 10*time.Second, "unsubscribed after the last waiter", func() bool {
		return admin.PubSubNumSub(ctx, redislock.WakeChannel(b)).Val()[redislock.WakeChannel(b)] == 0
	})
}

// pubsubClients counts the server's connections in pub/sub mode.
func pubsubClients(t *testing.T, c *redis.Client) int {
	t.Helper()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if flags, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(flags, "P") {
				n++
			}
		}
	}
	return n
}
