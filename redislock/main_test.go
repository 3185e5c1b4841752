package redislock_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/testserver"
)

func TestMain(m *testing.M) {
	// Several tests cut the server off on purpose; go-redis would log every
	// failed dial.
	redis.SetLogger(quiet{})
	if spec := os.Getenv(childWaiterEnv); spec != "" {
		childWaiter(spec) // a process of TestKilledWaiterIsSkipped; it never returns
	}
	goleak.VerifyTestMain(m, goRedisDialProbe)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// goRedisDialProbe is the goroutine go-redis starts after repeated dial
// failures; it notices its client's Close within a second.
var goRedisDialProbe = goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")

// newClient returns a go-redis client of addr, closed with the test.
func newClient(t testing.TB, addr string, mod ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr}
	for _, m := range mod {
		m(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

// newBackend returns a Backend over a fresh client of addr, both closed
// with the test.
func newBackend(t testing.TB, addr string, opts ...redislock.Option) *redislock.Backend {
	t.Helper()
	b := mustNew(t, newClient(t, addr), opts...)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Backend.Close: %v", err)
		}
	})
	return b
}

// mustNew returns a Backend over client, or ends the test.
func mustNew(t testing.TB, client redis.UniversalClient, opts ...redislock.Option) *redislock.Backend {
	t.Helper()
	b, err := redislock.New(client, opts...)
	if err != nil {
		t.Fatalf("redislock.New: %v", err)
	}
	return b
}

// testCtx returns a context bounding a test.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startRedis(t testing.TB, opts ...testserver.RedisOption) *testserver.Redis {
	t.Helper()
	return testserver.StartRedis(t, opts...)
}

// lockKey is the Redis key of the lock on key, per the documented layout.
func lockKey(key string) string { return redislock.DefaultPrefix + redislock.HashTag(key) + ":lock" }

// queueKey is the fair-mode queue of key, per the documented layout.
func queueKey(key string) string { return redislock.DefaultPrefix + redislock.HashTag(key) + ":queue" }

// channelOf is the release channel of key, per the documented layout.
func channelOf(key string) string {
	return redislock.DefaultPrefix + redislock.HashTag(key) + ":released"
}
