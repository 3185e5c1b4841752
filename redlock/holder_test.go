package redlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// The holder of one key (Holder, WatchHolder) and the election suite
// against real nodes: a watch is woken by the nodes' holder channels.
func TestHolderAndElection(t *testing.T) {
	srvs := startNodes(t, 3)
	factory := func(t *testing.T) driver.Backend { return newBackend(t, addrs(srvs)) }
	opts := []distlocktest.Option{
		distlocktest.WithTTL(time.Second),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			for _, s := range srvs {
				if _, err := s.Do("DEL", lockKey(key)); err != nil {
					t.Fatalf("DEL on %s: %v", s.Addr, err)
				}
			}
		}),
		distlocktest.WithLeakOptions(goRedisDialProbe),
	}
	t.Run("Holder", func(t *testing.T) { distlocktest.RunHolder(t, factory, opts...) })
	t.Run("Election", func(t *testing.T) { distlocktest.RunElection(t, factory, opts...) })
}

// Holder reports the grant a majority of the nodes hold, as List does: a
// grant on a minority of the nodes is no holder.
func TestHolderIsTheMajorityView(t *testing.T) {
	srvs := startNodes(t, 3)
	b := newBackend(t, addrs(srvs))
	ctx := testCtx(t)
	key := "svc/leader"
	value := fmt.Sprintf("secret|7|%d|owner", time.Now().UnixMilli())
	set := func(s *testserver.Redis) {
		t.Helper()
		if _, err := s.Do("SET", lockKey(key), value, "PX", "600000"); err != nil {
			t.Fatal(err)
		}
	}
	set(srvs[0])
	if h, held, err := b.Holder(ctx, key); held || err != nil {
		t.Errorf("Holder() with the grant on 1 node of 3 = %+v, %v, %v; want none", h, held, err)
	}
	set(srvs[2])
	h, held, err := b.Holder(ctx, key)
	if !held || err != nil || h.Token != 7 || h.Owner != "owner" || h.Expires.IsZero() {
		t.Errorf("Holder() with the grant on 2 nodes of 3 = %+v, %v, %v; want token 7", h, held, err)
	}
	hs, err := b.List(ctx, key)
	if err != nil || len(hs) != 1 || hs[0].Token != h.Token || hs[0].Owner != h.Owner {
		t.Errorf("List() = %+v, %v; want what Holder read, %+v", hs, err, h)
	}
}
