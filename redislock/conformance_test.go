package redislock_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/testserver"
)

func TestConformance(t *testing.T) {
	srv := startRedis(t)
	for _, mode := range suiteModes {
		t.Run(mode.name, func(t *testing.T) {
			distlocktest.Run(t,
				func(t *testing.T) driver.Backend { return newBackend(t, srv.Addr, mode.opts...) },
				suiteOptions(newClient(t, srv.Addr),
					distlocktest.WithUnreachable(func(t *testing.T) driver.Backend {
						b := mustNew(t, newClient(t, closedAddr(t), func(o *redis.Options) {
							o.DialTimeout, o.DialerRetries = time.Second, 1
						}), mode.opts...)
						t.Cleanup(func() { b.Close() })
						return b
					}))...,
			)
		})
	}
}

// The semaphore suite against a real server, in each mode (WithUnordered
// does not apply to permits, which are always served in line: the suite
// shows that it changes nothing). Revoking lapses every live permit of
// the semaphore at once, as the server's clock would: the scripts then
// drop them as expired. The TTL is longer than the lock suite's: its
// Limit test holds permits while dozens of waiters run, and on a loaded
// machine a watchdog's refresh came later than a 500ms TTL allows.
func TestSemaphoreConformance(t *testing.T) {
	srv := startRedis(t)
	admin := newClient(t, srv.Addr)
	for _, mode := range suiteModes {
		t.Run(mode.name, func(t *testing.T) {
			distlocktest.RunSemaphore(t,
				func(t *testing.T) driver.Backend { return newBackend(t, srv.Addr, mode.opts...) },
				distlocktest.WithTTL(2*time.Second),
				distlocktest.WithRevoke(func(t *testing.T, key string) { lapsePermits(t, admin, key) }),
				distlocktest.WithLeakOptions(goRedisDialProbe),
			)
		})
	}
}

// The shared lock suite against a real server, in the default mode
// (WithUnordered keeps no queue, and a Backend made with it refuses
// shared locks: TestSharedUnordered). Revoking lapses every shared grant
// of the key at once, as the server's clock would.
func TestSharedConformance(t *testing.T) {
	srv := startRedis(t)
	admin := newClient(t, srv.Addr)
	distlocktest.RunShared(t,
		func(t *testing.T) driver.Backend { return newBackend(t, srv.Addr, suiteModes[0].opts...) },
		distlocktest.WithTTL(2*time.Second),
		distlocktest.WithRevoke(func(t *testing.T, key string) { lapseReaders(t, admin, key) }),
		distlocktest.WithLeakOptions(goRedisDialProbe),
	)
}

// lapseReaders makes every shared grant of key lapse now, as when the
// server's clock passes their expiry; it fails the test if there is none.
func lapseReaders(t *testing.T, admin redis.Cmdable, key string) {
	t.Helper()
	ctx := context.Background()
	readers := redislock.DefaultPrefix + redislock.HashTag(key) + ":readers"
	ids, err := admin.ZRange(ctx, readers, 0, -1).Result()
	if err != nil || len(ids) == 0 {
		t.Fatalf("ZRANGE %s: %v, %v; want the live shared grants", readers, ids, err)
	}
	for _, id := range ids {
		if err := admin.ZAddXX(ctx, readers, redis.Z{Score: 0, Member: id}).Err(); err != nil {
			t.Fatalf("ZADD XX %s: %v", readers, err)
		}
	}
}

// lapsePermits makes every live permit of the semaphore at key lapse now,
// as when the server's clock passes their expiry; it fails the test if
// there is none.
func lapsePermits(t *testing.T, admin redis.Cmdable, key string) {
	t.Helper()
	ctx := context.Background()
	permits := redislock.DefaultPrefix + redislock.HashTag(key) + ":permits"
	ids, err := admin.ZRange(ctx, permits, 0, -1).Result()
	if err != nil || len(ids) == 0 {
		t.Fatalf("ZRANGE %s: %v, %v; want the live permits", permits, ids, err)
	}
	for _, id := range ids {
		if err := admin.ZAddXX(ctx, permits, redis.Z{Score: 0, Member: id}).Err(); err != nil {
			t.Fatalf("ZADD XX %s: %v", permits, err)
		}
	}
}

// suiteModes are the modes each topology runs the suite in.
var suiteModes = []struct {
	name string
	opts []redislock.Option
}{
	{"Default", []redislock.Option{redislock.WithWaiterLiveness(time.Second)}},
	{"Unordered", []redislock.Option{redislock.WithUnordered()}},
}

// suiteOptions are the suite's options for a topology whose keys admin can
// delete, followed by extra.
func suiteOptions(admin redis.Cmdable, extra ...distlocktest.Option) []distlocktest.Option {
	return append([]distlocktest.Option{
		distlocktest.WithTTL(500 * time.Millisecond),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			// The service drops the grant; the holder learns at its next
			// refresh.
			lock := "distlock:" + redislock.HashTag(key) + ":lock"
			if n, err := admin.Del(context.Background(), lock).Result(); err != nil || n != 1 {
				t.Fatalf("DEL %s: %d, %v", lock, n, err)
			}
		}),
		distlocktest.WithLeakOptions(goRedisDialProbe),
	}, extra...)
}

// closedWithTest has b closed when the test ends, reporting a failed Close.
func closedWithTest(t testing.TB, b *redislock.Backend) *redislock.Backend {
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Backend.Close: %v", err)
		}
	})
	return b
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
	for _, mode := range suiteModes {
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
				func(t *testing.T) driver.Backend {
					return closedWithTest(t, mustNew(t, newCluster(t), mode.opts...))
				},
				suiteOptions(admin)...,
			)
		})
	}

	// The semaphore suite: a semaphore's keys share its key's slot, and
	// wake-ups reach waiters subscribed on any node.
	t.Run("Semaphore", func(t *testing.T) {
		admin := newCluster(t)
		if err := admin.ForEachShard(context.Background(), func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
		distlocktest.RunSemaphore(t,
			func(t *testing.T) driver.Backend {
				return closedWithTest(t, mustNew(t, newCluster(t), suiteModes[0].opts...))
			},
			distlocktest.WithTTL(2*time.Second),
			distlocktest.WithRevoke(func(t *testing.T, key string) { lapsePermits(t, admin, key) }),
			distlocktest.WithLeakOptions(goRedisDialProbe),
		)
	})

	// The shared lock suite: a key's shared grants share its slot.
	t.Run("Shared", func(t *testing.T) {
		admin := newCluster(t)
		if err := admin.ForEachShard(context.Background(), func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
		distlocktest.RunShared(t,
			func(t *testing.T) driver.Backend {
				return closedWithTest(t, mustNew(t, newCluster(t), suiteModes[0].opts...))
			},
			distlocktest.WithTTL(2*time.Second),
			distlocktest.WithRevoke(func(t *testing.T, key string) { lapseReaders(t, admin, key) }),
			distlocktest.WithLeakOptions(goRedisDialProbe),
		)
	})

	// List (distlock status) scans every primary, not only one. The
	// Backend is opened from the CLI's URL form, naming two of the nodes.
	t.Run("List", func(t *testing.T) {
		ctx := testCtx(t)
		admin := newCluster(t)
		b, err := redislock.OpenURL(ctx, "redis+cluster://"+cluster.Nodes[1].Addr+","+cluster.Nodes[2].Addr+"?dial_timeout=2s")
		if err != nil {
			t.Fatal(err)
		}
		closedWithTest(t, b)
		var want []string
		primaries := map[int64]bool{}
		for i := range 30 {
			key := fmt.Sprintf("list/%02d", i)
			l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			want = append(want, key)
			slot, err := admin.ClusterKeySlot(ctx, "distlock:"+redislock.HashTag(key)+":lock").Result()
			if err != nil {
				t.Fatal(err)
			}
			primaries[slot*3/16384] = true // StartRedisCluster splits the slots evenly
		}
		if len(primaries) < 2 {
			t.Fatalf("the keys landed on %d primaries; the test needs several", len(primaries))
		}
		hs, err := b.List(ctx, "list/")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hs {
			got = append(got, h.Key)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("List on a Cluster = %q, want %q", got, want)
		}
	})
}
