package redlock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/redlock"
)

// KeyPath names the Redis key that holds a lock on every node, under the
// Backend's prefix: it exists on each node while the lock is held.
func TestKeyPath(t *testing.T) {
	srvs := startNodes(t, 3)
	ctx := testCtx(t)
	if got, want := newBackend(t, addrs(srvs)).KeyPath("a{b}"), lockKey("a{b}"); got != want {
		t.Errorf("KeyPath(a{b}) = %q, want the documented %q", got, want)
	}
	b := newBackend(t, addrs(srvs), redlock.WithPrefix("kp:"))
	key := "jobs/{nightly}"
	path := b.KeyPath(key)
	if !strings.HasPrefix(path, "kp:"+redislock.HashTag(key)) {
		t.Errorf("KeyPath(%q) = %q, not under the prefix and hash tag", key, path)
	}
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	for _, s := range srvs {
		if v, err := s.Do("EXISTS", path); err != nil || v != int64(1) {
			t.Errorf("EXISTS %s on %s while held: %v, %v; want 1", path, s.Addr, v, err)
		}
	}
}
