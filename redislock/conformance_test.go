package redislock_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/redislock"
)

func TestConformance(t *testing.T) {
	srv := startRedis(t)
	for _, mode := range []struct {
		name string
		opts []redislock.Option
	}{
		{"Default", nil},
		{"Fair", []redislock.Option{redislock.WithFair(), redislock.WithWaiterLiveness(time.Second)}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			admin := newClient(t, srv.Addr)
			distlocktest.Run(t,
				func(t *testing.T) distlock.Backend { return newBackend(t, srv.Addr, mode.opts...) },
				distlocktest.WithTTL(500*time.Millisecond),
				distlocktest.WithRevoke(func(t *testing.T, key string) {
					// The service drops the grant; the holder learns at its
					// next refresh.
					lock := "distlock:" + redislock.HashTag(key) + ":lock"
					if n, err := admin.Del(context.Background(), lock).Result(); err != nil || n != 1 {
						t.Fatalf("DEL %s: %d, %v", lock, n, err)
					}
				}),
				distlocktest.WithUnreachable(func(t *testing.T) distlock.Backend {
					b := redislock.New(newClient(t, closedAddr(t), func(o *redis.Options) {
						o.DialTimeout, o.DialerRetries = time.Second, 1
					}), mode.opts...)
					t.Cleanup(func() { b.Close() })
					return b
				}),
				distlocktest.WithLeakOptions(goRedisDialProbe),
			)
		})
	}
}

// closedAddr returns an address where nothing listens.
func closedAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
