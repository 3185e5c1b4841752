package zklock_test

import (
	"testing"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// The partition suite against a real ensemble, every member a Backend (a
// session) of its own: a dead member's grants end with its session, and
// the group's listings read the lock paths' children.
func TestPartitionConformance(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	distlocktest.RunPartition(t,
		func(t *testing.T) driver.Backend { return newBackendTimeout(t, z.Servers, conformanceSession) },
		distlocktest.WithTTL(conformanceSession),
		distlocktest.WithRevoke(func(t *testing.T, key string) { deleteHolder(t, adminConn(t, z.Servers), key) }),
	)
}
