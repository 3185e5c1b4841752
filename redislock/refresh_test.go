package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// RefreshAll over a single server refreshes up to 256 leases per script
// call, each owner-checked on its own.
func TestRefreshAllBatches(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	b, other := newBackend(t, srv.Addr), newBackend(t, srv.Addr)
	const n = 600
	leases := make([]driver.Lease, n)
	for i := range leases {
		l, err := b.Acquire(ctx, fmt.Sprintf("batch/%d", i), driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	// Some grants are gone, one of them now held by another owner.
	lost := map[int]bool{7: true, 300: true, 599: true}
	for i := range lost {
		admin.Del(ctx, lockKey(fmt.Sprintf("batch/%d", i)))
	}
	lo, err := other.Acquire(ctx, "batch/300", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	m := startMonitor(t, srv.Addr)
	res := b.RefreshAll(ctx, leases, 2*time.Minute)
	calls := 0
	for _, r := range m.requests(t, admin) {
		if r == "evalsha" || r == "eval" {
			calls++
		}
	}
	if calls != 3 && calls != 6 { // 3, or 3 more with EVAL after NOSCRIPT
		t.Errorf("%d script calls to refresh %d leases, want 3 (256 per call)", calls, n)
	}
	for i, r := range res {
		switch {
		case lost[i] && !errors.Is(r.Err, distlock.ErrLockLost):
			t.Errorf("lease %d, whose grant is gone: %v, want ErrLockLost", i, r.Err)
		case !lost[i] && r.Err != nil:
			t.Errorf("lease %d: %v", i, r.Err)
		case !lost[i] && r.Validity.TTL != 2*time.Minute:
			t.Errorf("lease %d: validity %v, want 2m", i, r.Validity.TTL)
		}
	}
	for _, i := range []int{0, 255, 256, 598} {
		if d := admin.PTTL(ctx, lockKey(fmt.Sprintf("batch/%d", i))).Val(); d <= time.Minute {
			t.Errorf("lease %d: PTTL %v after the refresh to 2m", i, d)
		}
	}
	if d := admin.PTTL(ctx, lockKey("batch/300")).Val(); d > time.Minute {
		t.Errorf("the other owner's lock was extended to %v", d)
	}
	if err := lo.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A *redis.Client talking to a server in cluster mode (one node holding
// every slot) cannot send keys of different slots in one call: RefreshAll
// falls back to one call per lease.
func TestRefreshAllClusterModeServer(t *testing.T) {
	srv := testserver.StartRedisCluster(t, 1).Nodes[0]
	ctx := testCtx(t)
	c := newClient(t, srv.Addr)
	b := mustNew(t, c)
	t.Cleanup(func() { b.Close() })
	var leases []driver.Lease
	for i := range 10 {
		l, err := b.Acquire(ctx, fmt.Sprintf("cluster-mode/%d", i), driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	crossSlot := refreshMany(ctx, c, leases)
	if !redis.HasErrorPrefix(crossSlot, "CROSSSLOT") {
		t.Fatalf("one call for keys of different slots: %v, want CROSSSLOT: the fault does not bite", crossSlot)
	}
	for round := range 2 {
		for i, r := range b.RefreshAll(ctx, leases, 2*time.Minute) {
			if r.Err != nil {
				t.Errorf("round %d, lease %d: %v", round, i, r.Err)
			}
		}
	}
}

// refreshMany sends one script call with the lock keys of leases, as a
// batched refresh would, and returns the server's error.
func refreshMany(ctx context.Context, c *redis.Client, leases []driver.Lease) error {
	keys := make([]string, len(leases))
	for i := range leases {
		keys[i] = lockKey(fmt.Sprintf("cluster-mode/%d", i))
	}
	return c.Eval(ctx, "return #KEYS", keys).Err()
}
