package redislock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/testserver"
)

// An evicting maxmemory-policy breaks mutual exclusion and tokens: filling
// memory evicts the lock key and its counter, and a second client is
// granted the key while the first holds it, with token 1 again. Shown with
// WithEvictionAllowed; by default the Backend refuses such a server.
func TestEvictionPolicy(t *testing.T) {
	srv := startRedis(t, testserver.WithRedisConfig("maxmemory 8mb", "maxmemory-policy allkeys-lru"))
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "evicted"
	opts := driver.AcquireOptions{TTL: time.Minute}

	t.Run("AllowedBites", func(t *testing.T) {
		a := newBackend(t, srv.Addr, redislock.WithEvictionAllowed())
		for range 2 { // a token above 1, to see it restart
			l, err := a.Acquire(ctx, key, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		la, err := a.Acquire(ctx, key, opts)
		if err != nil {
			t.Fatal(err)
		}
		tokenKey := redislock.DefaultPrefix + redislock.HashTag(key) + ":token"
		fill(t, admin, func() bool {
			return admin.Exists(ctx, lockKey(key), tokenKey).Val() == 0
		})
		lb, err := newBackend(t, srv.Addr, redislock.WithEvictionAllowed()).Acquire(ctx, key, opts)
		if err != nil {
			t.Fatalf("the second client was not granted the evicted key: %v; the fault did not bite", err)
		}
		if v := la.Validity(); time.Now().After(v.Sent.Add(v.TTL)) {
			t.Fatal("the first grant lapsed; the test is void")
		}
		if lb.Token() > la.Token() {
			t.Errorf("token %d after %d: the counter was not evicted", lb.Token(), la.Token())
		}
		t.Logf("fault bites: with %s allkeys-lru, token %d was granted while token %d was valid", "maxmemory-policy", lb.Token(), la.Token())
		admin.FlushAll(ctx)
	})

	t.Run("RefusedByDefault", func(t *testing.T) {
		for _, policy := range []string{"allkeys-lru", "volatile-lru", "volatile-ttl", "allkeys-random"} {
			if err := admin.ConfigSet(ctx, "maxmemory-policy", policy).Err(); err != nil {
				t.Fatal(err)
			}
			for _, wait := range []bool{false, true} {
				_, err := newBackend(t, srv.Addr).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: wait})
				if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "maxmemory-policy") || !strings.Contains(err.Error(), policy) {
					t.Errorf("%s, Wait %v: Acquire: %v, want ErrInvalidOption naming maxmemory-policy %s", policy, wait, err, policy)
				}
			}
		}
		if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
			t.Error("a refused Acquire left a lock behind")
		}
		// The refusal is not remembered: fixing the setting is enough.
		b := newBackend(t, srv.Addr)
		if _, err := b.Acquire(ctx, key, opts); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Fatalf("Acquire: %v, want ErrInvalidOption", err)
		}
		if err := admin.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		l, err := b.Acquire(ctx, key, opts)
		if err != nil {
			t.Fatalf("Acquire with noeviction: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("URL", func(t *testing.T) {
		if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			query string
			want  error
		}{{"", distlock.ErrInvalidOption}, {"?eviction_allowed=false", distlock.ErrInvalidOption}, {"?eviction_allowed=true", nil}} {
			b, err := redislock.OpenURL(ctx, "redis://"+srv.Addr+tc.query)
			if err != nil {
				t.Fatal(err)
			}
			l, err := b.Acquire(ctx, key, opts)
			if !errors.Is(err, tc.want) {
				t.Errorf("%q: Acquire: %v, want %v", tc.query, err, tc.want)
			}
			if err == nil {
				l.Release(ctx)
			}
			b.Close()
		}
	})

	t.Run("ConfigDenied", func(t *testing.T) {
		// A client that may not run CONFIG cannot check: the check is
		// skipped.
		if err := admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">secret", "~*", "&*", "+@all", "-config").Err(); err != nil {
			t.Fatal(err)
		}
		c := newClient(t, srv.Addr, func(o *redis.Options) { o.Username, o.Password = "noconfig", "secret" })
		if err := c.ConfigGet(ctx, "maxmemory-policy").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Fatalf("CONFIG GET as a user without CONFIG: %v, want NOPERM", err)
		}
		b := mustNew(t, c)
		t.Cleanup(func() { b.Close() })
		l, err := b.Acquire(ctx, key, opts)
		if err != nil {
			t.Fatalf("Acquire where CONFIG is denied: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A server with CONFIG renamed away (as managed services do) cannot be
// checked: the check is skipped.
func TestEvictionPolicyConfigRenamed(t *testing.T) {
	srv := startRedis(t, testserver.WithRedisConfig(`rename-command CONFIG ""`, "maxmemory-policy allkeys-lru"))
	ctx := testCtx(t)
	c := newClient(t, srv.Addr)
	if err := c.ConfigGet(ctx, "maxmemory-policy").Err(); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("CONFIG GET on a server without CONFIG: %v, want unknown command", err)
	}
	b := newBackend(t, srv.Addr)
	l, err := b.Acquire(ctx, "renamed-config", driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("Acquire where CONFIG is renamed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// fill writes data until done reports true (some keys were evicted), or
// fails after writing far more than maxmemory.
func fill(t *testing.T, c *redis.Client, done func() bool) {
	t.Helper()
	ctx := testCtx(t)
	value := strings.Repeat("x", 16<<10)
	for i := 0; i < 100; i++ {
		pipe := c.Pipeline()
		for j := range 64 {
			pipe.Set(ctx, fmt.Sprintf("filler:%d:%d", i, j), value, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		if done() {
			return
		}
	}
	t.Fatal("100MB written to an 8MB server and the keys are still there")
}
