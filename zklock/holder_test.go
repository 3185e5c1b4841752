package zklock_test

import (
	"testing"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// The holder of one key (Holder, WatchHolder, SetOwner) and the election
// suite against a real ensemble: a watch is woken by ZooKeeper watches on
// the lock path.
func TestHolderAndElection(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	factory := func(t *testing.T) driver.Backend { return newBackendTimeout(t, z.Servers, conformanceSession) }
	opts := []distlocktest.Option{
		distlocktest.WithTTL(conformanceSession),
		distlocktest.WithRevoke(func(t *testing.T, key string) { deleteHolder(t, adminConn(t, z.Servers), key) }),
	}
	t.Run("Holder", func(t *testing.T) { distlocktest.RunHolder(t, factory, opts...) })
	t.Run("Election", func(t *testing.T) { distlocktest.RunElection(t, factory, opts...) })
}
