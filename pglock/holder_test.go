package pglock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
)

// The holder of one key (Holder, SetOwner) and the election suite, in
// both modes, against a real server. The Backend cannot watch a key: a
// Client's Watch polls, and the suite skips the tests of a watch.
func TestHolderAndElection(t *testing.T) {
	admin := newPool(t, server)
	for _, tc := range []struct {
		name    string
		factory distlocktest.Factory
		opts    []distlocktest.Option
	}{
		{"Session", func(t *testing.T) driver.Backend { return newBackend(t, server) },
			[]distlocktest.Option{distlocktest.WithRevoke(func(t *testing.T, key string) { terminateHolder(t, admin, key) })}},
		{"Lease", func(t *testing.T) driver.Backend {
			return newLeaseBackend(t, server.DSN, pglock.WithListen(server.DSN))
		}, []distlocktest.Option{distlocktest.WithRevoke(func(t *testing.T, key string) { expireRow(t, admin, key) })}},
	} {
		t.Run(tc.name+"/Holder", func(t *testing.T) { distlocktest.RunHolder(t, tc.factory, tc.opts...) })
		t.Run(tc.name+"/Election", func(t *testing.T) { distlocktest.RunElection(t, tc.factory, tc.opts...) })
	}
}

// expireRow has the server drop key's lease-mode grant, as its expiry
// does: the holder learns at its next refresh.
func expireRow(t testing.TB, admin *pgxpool.Pool, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tag, err := admin.Exec(ctx, `UPDATE distlock_lease SET expires = '-infinity' WHERE key = $1 AND grant_id IS NOT NULL AND expires > now()`, key)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("expire the grant of %q: %v, %v", key, tag, err)
	}
}
