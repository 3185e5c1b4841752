package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// The guide's RenewingLock renews with an unchecked EXPIRE: after its own
// lease lapsed, it extends the next holder's. The baseline shows the bug
// with raw commands; the guard shows Refresh is owner-checked.
func TestRefreshAfterExpiryIsOwnerChecked(t *testing.T) {
	srv := startRedis(t)
	ctx, c := testCtx(t), newClient(t, srv.Addr)
	expired := func(k string) func() bool {
		return func() bool { return c.Exists(ctx, k).Val() == 0 }
	}

	// Baseline: A's lease lapses, B takes the key, A "renews" with PEXPIRE.
	raw := "baseline"
	if !c.SetNX(ctx, raw, "A", 50*time.Millisecond).Val() {
		t.Fatal("baseline: A's SET NX failed")
	}
	eventually(t, 10*time.Second, "A's raw lease lapses", expired(raw))
	if !c.SetNX(ctx, raw, "B", 2*time.Second).Val() {
		t.Fatal("baseline: B's SET NX failed")
	}
	if !c.PExpire(ctx, raw, time.Minute).Val() {
		t.Fatal("baseline: A's PEXPIRE did not apply")
	}
	if d := c.PTTL(ctx, raw).Val(); d <= 2*time.Second {
		t.Fatalf("baseline: B's PTTL %v; the unchecked PEXPIRE should have extended it", d)
	}
	t.Logf("baseline bites: A's unchecked PEXPIRE extended B's lock to %v", c.PTTL(ctx, raw).Val())

	// Guard.
	key := "owner-checked-refresh"
	ba, bb := newBackend(t, srv.Addr), newBackend(t, srv.Addr)
	la, err := ba.Acquire(ctx, key, driver.AcquireOptions{TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "A's lease lapses", expired(lockKey(key)))
	lb, err := bb.Acquire(ctx, key, driver.AcquireOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := la.Refresh(ctx, time.Minute); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("expired holder's Refresh: %v, want ErrLockLost", err)
	}
	if d := c.PTTL(ctx, lockKey(key)).Val(); d <= 0 || d > 2*time.Second {
		t.Errorf("B's PTTL after A's Refresh is %v, want at most B's own 2s", d)
	}
	// The batch path is owner-checked too.
	if res := ba.RefreshAll(ctx, []driver.Lease{la}, time.Minute); !errors.Is(res[0].Err, distlock.ErrLockLost) {
		t.Errorf("A's RefreshAll: %v, want ErrLockLost", res[0].Err)
	}
	if d := c.PTTL(ctx, lockKey(key)).Val(); d <= 0 || d > 2*time.Second {
		t.Errorf("B's PTTL after A's RefreshAll is %v, want at most B's own 2s", d)
	}
	if res := bb.RefreshAll(ctx, []driver.Lease{lb}, time.Minute); res[0].Err != nil {
		t.Errorf("B's RefreshAll: %v", res[0].Err)
	}
	if d := c.PTTL(ctx, lockKey(key)).Val(); d <= 2*time.Second {
		t.Errorf("B's own batched refresh did not extend its lock: PTTL %v", d)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
