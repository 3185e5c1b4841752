package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/redlock"
	"github.com/distlock/distlock/testserver"
)

func TestMain(m *testing.M) {
	// Several tests stop servers on purpose; go-redis would log every
	// failed dial.
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m, goRedisDialProbe)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// goRedisDialProbe is the goroutine go-redis starts after repeated dial
// failures; it notices its client's Close within a second.
var goRedisDialProbe = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

// startNodes starts n independent redis-servers.
func startNodes(t testing.TB, n int, opts ...testserver.RedisOption) []*testserver.Redis {
	t.Helper()
	srvs := make([]*testserver.Redis, n)
	for i := range srvs {
		srvs[i] = testserver.StartRedis(t, opts...)
	}
	return srvs
}

// addrs returns the servers' addresses.
func addrs(srvs []*testserver.Redis) []string {
	var out []string
	for _, s := range srvs {
		out = append(out, s.Addr)
	}
	return out
}

// newClient returns a go-redis client of addr, closed with the test.
func newClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// newBackend returns a Backend over fresh clients of addrs, all closed
// with the test.
func newBackend(t testing.TB, addrs []string, opts ...redlock.Option) *redlock.Backend {
	t.Helper()
	var nodes []redlock.Node
	for _, a := range addrs {
		nodes = append(nodes, newClient(t, a))
	}
	return newBackendOf(t, nodes, opts...)
}

// newBackendOf returns a Backend over nodes, closed with the test.
func newBackendOf(t testing.TB, nodes []redlock.Node, opts ...redlock.Option) *redlock.Backend {
	t.Helper()
	b, err := redlock.New(nodes, opts...)
	if err != nil {
		t.Fatalf("redlock.New: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Backend.Close: %v", err)
		}
	})
	return b
}

// testCtx returns a context bounding a test.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// lockKey is the Redis key of the lock on key, per the documented layout.
func lockKey(key string) string { return redlock.DefaultPrefix + redislock.HashTag(key) + ":lock" }
