package etcdlock_test

import (
	"testing"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/testserver"
)

// The partition suite (package partition) over etcd, every member a Backend (and etcd client)
// of its own: a dead member's grants end with its session lease.
func TestPartitionConformance(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	distlocktest.RunPartition(t,
		func(t *testing.T) driver.Backend { return newBackend(t, newClient(t, e.Endpoints)) },
		distlocktest.WithTTL(suiteTTL),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			revokeHolder(t, admin, etcdlock.DefaultPrefix, key)
		}),
	)
}
