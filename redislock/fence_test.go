package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/metrictest"
	"github.com/distlock/distlock/redislock"
)

// The guide's scenario: A holds token 33 and pauses, B writes with 34, A's
// write with 33 is refused and changes nothing. Equal tokens are admitted.
func TestFence(t *testing.T) {
	srv := startRedis(t)
	ctx, c := testCtx(t), newClient(t, srv.Addr)
	mp := metrictest.NewProvider()
	f := redislock.NewFence(c, redislock.DefaultFencePrefix, fence.WithMeterProvider(mp))
	const res = "acct/42"
	key := "balance:" + redislock.HashTag(res)

	if err := f.Set(ctx, res, 33, key, "100", 0); err != nil {
		t.Fatalf("first write: %v", err)
	}
	if err := f.Set(ctx, res, 34, key, "200", 0); err != nil {
		t.Fatalf("newer token: %v", err)
	}
	err := f.Set(ctx, res, 33, key, "stale", 0)
	var se *fence.StaleTokenError
	if !errors.Is(err, fence.ErrStaleToken) || !errors.As(err, &se) || se.Token != 33 || se.Highest != 34 || se.Resource != res {
		t.Fatalf("stale write: %v, want a *fence.StaleTokenError for 33 < 34", err)
	}
	if v := c.Get(ctx, key).Val(); v != "200" {
		t.Errorf("after a refused write the value is %q, want 200", v)
	}
	if n := metrictest.Rejections(t, mp, "redislock.Fence"); n != 1 {
		t.Errorf("distlock.fence.rejections %d after one refused write, want 1", n)
	}
	if err := f.Set(ctx, res, 34, key, "201", time.Minute); err != nil {
		t.Errorf("second write with the same token: %v", err)
	}
	if v, d := c.Get(ctx, key).Val(), c.PTTL(ctx, key).Val(); v != "201" || d <= 0 {
		t.Errorf("value %q with PTTL %v, want 201 expiring", v, d)
	}

	hkey := "acct:" + redislock.HashTag(res)
	if err := f.HSet(ctx, res, 35, hkey, map[string]string{"owner": "b", "n": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := f.HSet(ctx, res, 34, hkey, map[string]string{"owner": "a"}); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("stale HSet: %v", err)
	}
	if v := c.HGet(ctx, hkey, "owner").Val(); v != "b" {
		t.Errorf("hash field owner = %q after a refused HSet, want b", v)
	}
	if err := f.Del(ctx, res, 34, key); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("stale Del: %v", err)
	}
	if err := f.Set(ctx, res, 0, key, "v", 0); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("token 0: %v", err) // refused without a round trip
	}
	if n := metrictest.Rejections(t, mp, "redislock.Fence"); n != 4 {
		t.Errorf("distlock.fence.rejections %d after four refused writes, want 4", n)
	}
	if c.Exists(ctx, key).Val() != 1 {
		t.Errorf("a refused Del deleted the key")
	}
	if err := f.Del(ctx, res, 35, key); err != nil || c.Exists(ctx, key).Val() != 0 {
		t.Errorf("Del with the highest token: %v, exists %d", err, c.Exists(ctx, key).Val())
	}
	if h, err := f.Highest(ctx, res); err != nil || h != 35 {
		t.Errorf("Highest = %d, %v; want 35", h, err)
	}

	// Tokens are compared as integers, not as strings ("9" < "10").
	if err := f.Set(ctx, "digits", 9, "d:"+redislock.HashTag("digits"), "x", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, "digits", 10, "d:"+redislock.HashTag("digits"), "y", 0); err != nil {
		t.Errorf("token 10 after 9: %v", err)
	}
	if err := f.Set(ctx, "digits", 1<<63, "d:"+redislock.HashTag("digits"), "z", 0); err != nil {
		t.Errorf("token 2^63: %v", err)
	}
	if err := f.Set(ctx, "digits", 1<<63-1, "d:"+redislock.HashTag("digits"), "z", 0); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("token 2^63-1 after 2^63: %v", err)
	}

	// Bad input.
	if err := f.Set(ctx, res, 40, "untagged", "v", 0); !errors.Is(err, redislock.ErrWrongSlot) {
		t.Errorf("untagged key: %v, want ErrWrongSlot", err)
	}
	if err := f.Set(ctx, res, 40, "x:"+redislock.HashTag("other"), "v", 0); !errors.Is(err, redislock.ErrWrongSlot) {
		t.Errorf("key of another resource: %v, want ErrWrongSlot", err)
	}
	if err := f.Set(ctx, res, 0, key, "v", 0); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("token 0: %v, want ErrStaleToken", err)
	}
	if err := f.Set(ctx, "", 40, key, "v", 0); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("empty resource: %v", err)
	}
	if err := f.HSet(ctx, res, 40, hkey, nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("HSet without fields: %v", err)
	}
	if err := f.Set(ctx, res, 40, key, "v", -time.Second); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("negative TTL: %v", err)
	}
	if err := redislock.NewFence(c, "a{").Set(ctx, res, 40, key, "v", 0); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("brace prefix: %v", err)
	}
	if err := redislock.NewFence(c, "").Set(ctx, res, 40, key, "v", 0); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("empty prefix: %v", err)
	}
	if h, _ := f.Highest(ctx, res); h != 35 {
		t.Errorf("refused calls changed the highest token to %d", h)
	}
}

// A Fence guards writes with the tokens of real grants: a holder whose
// lease lapsed cannot overwrite the next holder's data.
func TestFenceWithLocks(t *testing.T) {
	srv := startRedis(t)
	ctx, c := testCtx(t), newClient(t, srv.Addr)
	key := "fenced/resource"
	data := "data:" + redislock.HashTag(key)
	f := redislock.NewFence(c, redislock.DefaultFencePrefix)
	ba, bb := newBackend(t, srv.Addr), newBackend(t, srv.Addr)

	la, err := ba.Acquire(ctx, key, driver.AcquireOptions{TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// A pauses past its TTL; B takes the key and writes.
	eventually(t, 10*time.Second, "A's lease lapses", func() bool { return c.Exists(ctx, lockKey(key)).Val() == 0 })
	lb, err := bb.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, key, lb.Token(), data, "B", 0); err != nil {
		t.Fatal(err)
	}
	// A wakes up and writes with its old token.
	if err := f.Set(ctx, key, la.Token(), data, "A", 0); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("paused holder's write: %v, want ErrStaleToken", err)
	}
	if v, err := c.Get(ctx, data).Result(); err != nil || v != "B" {
		t.Errorf("data = %q, %v; want B", v, err)
	}
	lb.Release(ctx)
	if _, err := redislock.NewFence(nil, redislock.DefaultFencePrefix).Highest(ctx, key); err == nil {
		t.Errorf("Highest with a nil client succeeded")
	}
}
