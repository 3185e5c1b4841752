package redislock_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// The partition suite against a real server, in each mode, every member a
// Backend of its own: a dead member's grants lapse by their TTL.
func TestPartitionConformance(t *testing.T) {
	srv := startRedis(t)
	for _, mode := range suiteModes {
		t.Run(mode.name, func(t *testing.T) {
			distlocktest.RunPartition(t,
				func(t *testing.T) driver.Backend { return newBackend(t, srv.Addr, mode.opts...) },
				suiteOptions(newClient(t, srv.Addr))...)
		})
	}
}

// The partition suite against a Redis Cluster of three primaries: a
// group's keys spread over the nodes, and the members' listings scan
// every primary.
func TestPartitionConformanceCluster(t *testing.T) {
	cluster := testserver.StartRedisCluster(t, 3)
	newCluster := func(t *testing.T) *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	// The admin client connects to every node now (see TestConformanceCluster).
	admin := newCluster(t)
	if err := admin.ForEachShard(context.Background(), func(ctx context.Context, c *redis.Client) error {
		return c.Ping(ctx).Err()
	}); err != nil {
		t.Fatal(err)
	}
	distlocktest.RunPartition(t,
		func(t *testing.T) driver.Backend {
			return closedWithTest(t, mustNew(t, newCluster(t), suiteModes[0].opts...))
		},
		suiteOptions(admin)...)
}
