package redislock_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/internal/testserver"
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

// The suite against a real Redis Cluster of three primaries, through
// go-redis's ClusterClient: keys of different locks land on different
// nodes, release notices travel by cluster-wide PUBLISH, and RefreshAll
// groups leases by slot.
func TestConformanceCluster(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	newCluster := func(t *testing.T) *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	for _, mode := range []struct {
		name string
		opts []redislock.Option
	}{
		{"Default", nil},
		{"Fair", []redislock.Option{redislock.WithFair(), redislock.WithWaiterLiveness(time.Second)}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			// The admin client connects to every node now: the goroutines
			// go-redis starts per node connection would otherwise start
			// inside the first subtest that revokes, and fail its leak check.
			admin := newCluster(t)
			if err := admin.ForEachShard(context.Background(), func(ctx context.Context, c *redis.Client) error {
				return c.Ping(ctx).Err()
			}); err != nil {
				t.Fatal(err)
			}
			distlocktest.Run(t,
				func(t *testing.T) distlock.Backend {
					b := redislock.New(newCluster(t), mode.opts...)
					t.Cleanup(func() {
						if err := b.Close(); err != nil {
							t.Errorf("Backend.Close: %v", err)
						}
					})
					return b
				},
				distlocktest.WithTTL(500*time.Millisecond),
				distlocktest.WithRevoke(func(t *testing.T, key string) {
					lock := "distlock:" + redislock.HashTag(key) + ":lock"
					if n, err := admin.Del(context.Background(), lock).Result(); err != nil || n != 1 {
						t.Fatalf("DEL %s: %d, %v", lock, n, err)
					}
				}),
				distlocktest.WithLeakOptions(goRedisDialProbe),
			)
		})
	}
}
