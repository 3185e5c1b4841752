package pglock_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

func TestConformance(t *testing.T) {
	admin := newPool(t, server)
	distlocktest.Run(t,
		func(t *testing.T) driver.Backend { return newBackend(t, server) },
		distlocktest.WithRevoke(func(t *testing.T, key string) { terminateHolder(t, admin, key) }),
		distlocktest.WithUnreachable(func(t *testing.T) driver.Backend {
			pool, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=2", closedAddr(t)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			b, err := pglock.New(pool)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}),
	)
}

// terminateSQL ends the session that holds the advisory lock of key ($1),
// waiting up to 10s for it to be gone, and reports how many it ended.
const terminateSQL = `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000))
FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
	AND ((classid::int8 << 32) | objid::int8) = hashtextextended($1, 0)`

// terminateHolder has the server end the session holding key's lock, as an
// operator's pg_terminate_backend does.
func terminateHolder(t testing.TB, admin *pgxpool.Pool, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := admin.QueryRow(ctx, terminateSQL, key).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminate the holder of %q: %d sessions, %v", key, n, err)
	}
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

var _ = testserver.StartPostgres
