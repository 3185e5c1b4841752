package pglock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// The partition suite in both modes against a real server, and in lease
// mode through PgBouncer in transaction mode with LISTEN on a direct
// session, as the conformance suite runs: every member a Backend and
// pool of its own. In session mode a dead member's grants end with its
// connections; in lease mode they lapse by their TTL.
//
// In session mode every lock held or waited for keeps a connection: a
// member alone holds the membership and all the units, and lists the
// group besides, so its pool allows 80 connections (the suite's others
// allow 50, and a member whose pool ran out would wait for a connection
// to list the group, and so give up no unit). Idle connections are closed
// after a second, so that the members' pools together stay within the
// server's max_connections (200) as units move between them; and the
// group shares 16 units, not 64, since opening 64 connections at once
// took a loaded 2-core machine up to 16s. Lease mode's
// TTL is 3s: with 1s, on a loaded machine, members lost their membership
// to late renewals again and again.
func TestPartitionConformance(t *testing.T) {
	admin := newPool(t, server)
	bouncer := testserver.StartPgBouncer(t, server)
	for _, tc := range []struct {
		name    string
		factory distlocktest.Factory
		opts    []distlocktest.Option
	}{
		{"Session", func(t *testing.T) driver.Backend {
			b, err := pglock.New(newPool(t, server, "pool_max_conns=80", "pool_max_conn_idle_time=1s", "pool_health_check_period=500ms"))
			if err != nil {
				t.Fatalf("pglock.New: %v", err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}, []distlocktest.Option{distlocktest.WithRevoke(func(t *testing.T, key string) { terminateHolder(t, admin, key) }), distlocktest.WithPartitionUnits(16)}},
		{"Lease", func(t *testing.T) driver.Backend {
			return newLeaseBackend(t, server.DSN, pglock.WithListen(server.DSN))
		}, []distlocktest.Option{distlocktest.WithTTL(3 * time.Second), distlocktest.WithRevoke(func(t *testing.T, key string) { expireRow(t, admin, key) })}},
		{"LeaseThroughPgBouncer", func(t *testing.T) driver.Backend {
			return newLeaseBackend(t, bouncer.DSN, pglock.WithListen(server.DSN))
		}, []distlocktest.Option{distlocktest.WithTTL(3 * time.Second), distlocktest.WithRevoke(func(t *testing.T, key string) { expireRow(t, admin, key) })}},
	} {
		t.Run(tc.name, func(t *testing.T) { distlocktest.RunPartition(t, tc.factory, tc.opts...) })
	}
}
