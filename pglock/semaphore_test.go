package pglock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// revokePermits ends the live permits of the semaphore at key, as an
// operator's UPDATE does; their holders learn it at their next renewal.
func revokePermits(t testing.TB, admin *pgxpool.Pool, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tag, err := admin.Exec(ctx, `UPDATE distlock_permit SET expires = '-infinity' WHERE key = $1 AND expires > now()`, key)
	if err != nil || tag.RowsAffected() == 0 {
		t.Fatalf("revoke the permits of %q: %v, %v", key, tag, err)
	}
}

// The conformance suite of semaphores, in session mode and in lease-table
// mode: directly, with LISTEN on a session of its own; through PgBouncer
// in transaction mode, with LISTEN on a direct session; and through
// PgBouncer with no LISTEN (polling).
func TestSemaphoreConformance(t *testing.T) {
	admin := newPool(t, server)
	revoke := distlocktest.WithRevoke(func(t *testing.T, key string) { revokePermits(t, admin, key) })
	t.Run("Session", func(t *testing.T) {
		distlocktest.RunSemaphore(t, func(t *testing.T) driver.Backend { return newBackend(t, server) }, revoke)
	})
	bouncer := testserver.StartPgBouncer(t, server)
	for _, tc := range []struct {
		name string
		dsn  string
		opts []pglock.Option
	}{
		{"Lease/Direct", server.DSN, []pglock.Option{pglock.WithListen(server.DSN)}},
		{"Lease/PgBouncer", bouncer.DSN, []pglock.Option{pglock.WithListen(server.DSN)}},
		{"Lease/PgBouncerPolling", bouncer.DSN, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			distlocktest.RunSemaphore(t, func(t *testing.T) driver.Backend { return newLeaseBackend(t, tc.dsn, tc.opts...) }, revoke)
		})
	}
}
