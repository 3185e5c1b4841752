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
	"github.com/distlock/distlock/testserver"
)

// Every key a lock uses hashes to one slot, whatever braces the user key
// contains: checked on a real one-node Redis Cluster, which refuses
// cross-slot scripts, and with CLUSTER KEYSLOT.
func TestKeysShareOneSlot(t *testing.T) {
	srv := testserver.StartRedisCluster(t, 1).Nodes[0]
	ctx := testCtx(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { cc.Close() })
	var opts []redislock.Option
	holderB, waiterB := mustNew(t, cc, opts...), mustNew(t, cc, opts...)
	t.Cleanup(func() { holderB.Close(); waiterB.Close() })
	f := redislock.NewFence(cc, redislock.DefaultFencePrefix)

	for _, key := range []string{"a{b}c", "{", "}", "{}", "}{", "{a}", "a}b{c", "%7D", "plain"} {
		lh, err := holderB.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatalf("Acquire(%q): %v", key, err)
		}
		done := make(chan error, 1)
		go func() {
			l, err := waiterB.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			if err == nil {
				err = l.Release(ctx)
			}
			done <- err
		}()
		eventually(t, 10*time.Second, "waiter queued", func() bool { return cc.ZCard(ctx, queueKey(key)).Val() == 1 })
		data := "data:" + redislock.HashTag(key)
		if err := f.Set(ctx, key, lh.Token(), data, "v", 0); err != nil {
			t.Fatalf("Fence.Set(%q): %v", key, err)
		}
		keys := scanKeys(t, cc, "*")
		if err := lh.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("waiter on %q: %v", key, err)
		}
		keys = append(keys, scanKeys(t, cc, "*")...)

		tag := redislock.HashTag(key)
		kinds := map[string]bool{}
		slots := map[int64][]string{}
		for _, k := range keys {
			if !strings.Contains(k, tag) {
				continue
			}
			for _, kind := range []string{":lock", ":token", ":queue", ":alive", ":last", ":fence"} {
				if strings.Contains(k, tag+kind) {
					kinds[kind] = true
				}
			}
			if k == data {
				kinds["data"] = true
			}
			slot, err := cc.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots[slot] = append(slots[slot], k)
		}
		if len(kinds) != 7 {
			t.Errorf("key %q: saw key kinds %v, want all 7 (lock, token, queue, alive, last release, fence, data)", key, kinds)
		}
		if len(slots) != 1 {
			t.Errorf("key %q: its keys span slots %v", key, slots)
		}
		cc.FlushAll(ctx)
	}
}

func scanKeys(t *testing.T, cc *redis.ClusterClient, pattern string) []string {
	t.Helper()
	var keys []string
	var mu sync.Mutex
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, pattern).Result()
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// KeyPath names the Redis key that holds a lock, under the Backend's
// prefix: it exists while the lock is held, and is gone after the release.
func TestKeyPath(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	if got, want := newBackend(t, srv.Addr).KeyPath("a{b}"), lockKey("a{b}"); got != want {
		t.Errorf("KeyPath(a{b}) = %q, want the documented %q", got, want)
	}
	b := newBackend(t, srv.Addr, redislock.WithPrefix("kp:"))
	key := "jobs/{nightly}"
	path := b.KeyPath(key)
	if !strings.HasPrefix(path, "kp:"+redislock.HashTag(key)) {
		t.Errorf("KeyPath(%q) = %q, not under the prefix and hash tag", key, path)
	}
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := srv.Do("EXISTS", path); err != nil || v != int64(1) {
		t.Errorf("EXISTS %s while held: %v, %v; want 1", path, v, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := srv.Do("EXISTS", path); err != nil || v != int64(0) {
		t.Errorf("EXISTS %s after the release: %v, %v; want 0", path, v, err)
	}
}
