package redlock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
)

// The partition suite against three real nodes, every member a Backend of
// its own: a dead member's grants lapse by their TTL on each node, and a
// group's listings are the nodes' majority view.
func TestPartitionConformance(t *testing.T) {
	srvs := startNodes(t, 3)
	distlocktest.RunPartition(t,
		func(t *testing.T) driver.Backend { return newBackend(t, addrs(srvs)) },
		distlocktest.WithTTL(time.Second),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			for _, s := range srvs {
				if _, err := s.Do("DEL", lockKey(key)); err != nil {
					t.Fatalf("DEL on %s: %v", s.Addr, err)
				}
			}
		}),
		distlocktest.WithLeakOptions(goRedisDialProbe),
	)
}
