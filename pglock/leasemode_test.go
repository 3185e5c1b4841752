package pglock_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/pglock"
)

// newLeaseBackend returns a LeaseMode Backend over a pool of its own to
// dsn, both closed when the test ends.
func newLeaseBackend(t testing.TB, dsn string, opts ...pglock.Option) *pglock.Backend {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn+"&pool_max_conns=8")
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	b, err := pglock.New(pool, append([]pglock.Option{pglock.WithMode(pglock.LeaseMode)}, opts...)...)
	if err != nil {
		t.Fatalf("pglock.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// unreachableLease returns a LeaseMode Backend whose server is not there.
func unreachableLease(t *testing.T) distlock.Backend {
	return newLeaseBackend(t, fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=2", closedAddr(t)))
}

// The conformance suite in lease-table mode: directly, with LISTEN on a
// session of its own; through PgBouncer in transaction mode, with LISTEN
// on a direct session; and through PgBouncer with no LISTEN (polling).
func TestLeaseConformance(t *testing.T) {
	bouncer := testserver.StartPgBouncer(t, server)
	for _, tc := range []struct {
		name string
		dsn  string
		opts []pglock.Option
	}{
		{"Direct", server.DSN, []pglock.Option{pglock.WithListen(server.DSN)}},
		{"PgBouncer", bouncer.DSN, []pglock.Option{pglock.WithListen(server.DSN)}},
		{"PgBouncerPolling", bouncer.DSN, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			distlocktest.Run(t,
				func(t *testing.T) distlock.Backend { return newLeaseBackend(t, tc.dsn, tc.opts...) },
				distlocktest.WithUnreachable(unreachableLease),
			)
		})
	}
}
