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

// The holder of one key (Holder, SetOwner, a watch woken without
// polling) and the election suite, in both modes, against a real server,
// and in lease mode through PgBouncer in transaction mode with LISTEN on
// a direct session.
func TestHolderAndElection(t *testing.T) {
	admin := newPool(t, server)
	bouncer := testserver.StartPgBouncer(t, server)
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
		{"LeaseThroughPgBouncer", func(t *testing.T) driver.Backend {
			return newLeaseBackend(t, bouncer.DSN, pglock.WithListen(server.DSN))
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

// SetOwner in session mode through a pooler in session mode (PgBouncer
// with pool_mode=session), where session locks work: the pid the pooler
// announces is its own, not the server session's, and the owner check must
// use the session's real pid (it compared the announced one, so that
// SetOwner always reported the lock lost, and the Client ended a live
// lock).
func TestSetOwnerThroughSessionPooler(t *testing.T) {
	bouncer := testserver.StartPgBouncer(t, server, testserver.WithPgBouncerSessionPool())
	pool, err := pgxpool.New(context.Background(), bouncer.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b, err := pglock.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := b.Acquire(ctx, "pooled/owner", driver.AcquireOptions{TTL: time.Minute, Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := l.(driver.OwnerSetter).SetOwner(ctx, "b"); err != nil {
		t.Fatalf("SetOwner through a session pooler: %v", err)
	}
	if h, held, err := b.Holder(ctx, "pooled/owner"); err != nil || !held || h.Owner != "b" || h.Token != l.Token() {
		t.Errorf("Holder after SetOwner = %+v, %v, %v; want owner b, token %d", h, held, err, l.Token())
	}
}

// In session mode the next grant of a key holds its lock before its token
// commits (and, after a lost grant, for the loss grace): Holder must not
// report the previous grant then, released or lost, as held by that
// session. It did, so that a watcher woken by a release read the released
// term again after reading no leader.
func TestHolderNotTheNextGrantInProgress(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, l driver.Lease, key string)
	}{
		{"Released", func(t *testing.T, l driver.Lease, key string) {
			if err := l.Release(testCtx(t)); err != nil {
				t.Fatal(err)
			}
		}},
		{"Lost", func(t *testing.T, l driver.Lease, key string) { terminateHolder(t, newPool(t, server), key) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, key := testCtx(t), "holder/next/"+t.Name()
			b := newBackend(t, server)
			l := acquire(t, b, ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "first"})
			tc.end(t, l, key)
			expectHolder(t, b, key, 0, "")

			// The next grant, its transaction not yet committed.
			next := rawConn(t, server)
			tx, err := next.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			var token int64
			if err := tx.QueryRow(ctx, `SELECT distlock_acquire($1, true, 'next', '0s')`, key).Scan(&token); err != nil {
				t.Fatal(err)
			}
			expectHolder(t, b, key, 0, "")
			if hs, err := b.List(ctx, key); err != nil || len(hs) != 0 {
				t.Errorf("List(%q) = %+v, %v while the next grant is in progress; want none", key, hs, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			expectHolder(t, b, key, uint64(token), "next")
		})
	}
}
