package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/redislock"
)

// A watch marker lost while a watch lasts (a restart without persistence,
// a failover, an eviction): the grants since are not announced, and the
// watcher reads again when its next re-mark finds the marker gone. (The
// grant went unseen for the whole term before: the re-mark set the marker
// again without waking the watcher.)
func TestWatchReadsAgainAfterMarkerLoss(t *testing.T) {
	ctx := context.Background()
	srv := startRedis(t)
	rdb := newClient(t, srv.Addr)
	c, err := distlock.New(newBackend(t, srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := c.Watch(wctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if h := <-w; h.Token != 0 {
		t.Fatalf("first state of a free key: %+v", h)
	}
	marker := redislock.DefaultPrefix + redislock.HashTag("k") + ":watched"
	if n, err := rdb.Del(ctx, marker).Result(); n != 1 || err != nil {
		t.Fatalf("DEL %s: %d, %v; want the marker deleted", marker, n, err)
	}
	other, err := distlock.New(newBackend(t, srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	l, err := other.Acquire(ctx, "k", distlock.WithTTL(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// The re-mark comes a third of the marker's lifetime (30s) after the
	// last; the deadline is far past it, and short of the grant's TTL.
	select {
	case h := <-w:
		if h.Token != l.Token() {
			t.Errorf("Watch sent %+v; want the grant %d", h, l.Token())
		}
	case <-time.After(time.Minute):
		t.Errorf("the grant (token %d) was never seen after the marker was lost", l.Token())
	}
}
