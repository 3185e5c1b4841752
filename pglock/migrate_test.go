package pglock_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// A database made by an earlier version of the schema (in testdata) is
// migrated by the first use of several Backends at once, in both modes,
// each of which then works; the previous versions' lease acquire, which
// ignores the queue, still excludes the new one; the permits (version 6)
// and shared grants (version 7) work; and the migrated functions call no
// function that another role put in schema public. Version 8's lease-mode
// readers work, and the earlier versions' exclusive tries respect them.
func TestMigrateFromEarlierVersionsConcurrently(t *testing.T) {
	for _, version := range []string{"v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8"} {
		t.Run(version, func(t *testing.T) {
			ctx := testCtx(t)
			old, err := os.ReadFile("testdata/schema-" + version + ".sql")
			if err != nil {
				t.Fatal(err)
			}
			s := newSharedDB(t)
			s.exec(t, s.app, string(old))
			dsn := s.dsn(s.app)
			const n = 6
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					opts := []pglock.Option{pglock.WithMode(pglock.LeaseMode), pglock.WithListen(dsn)}
					if i%2 == 1 {
						opts = nil
					}
					b, err := pglock.New(newPoolDSN(t, dsn), opts...)
					if err != nil {
						t.Error(err)
						return
					}
					defer b.Close()
					l, err := b.Acquire(ctx, "migrate/"+t.Name(), driver.AcquireOptions{TTL: time.Minute, Wait: true})
					if err != nil {
						t.Errorf("backend %d: %v", i, err)
						return
					}
					if err := l.Release(ctx); err != nil {
						t.Errorf("backend %d: release: %v", i, err)
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			pool := s.pool(t, s.app)
			checkFunctions(t, pool)
			// The previous versions' lease acquire, which ignores the
			// queue, and the new one exclude each other.
			key := "migrate/old/" + t.Name()
			var token *int64
			if err := pool.QueryRow(ctx, `SELECT granted FROM distlock_lease_acquire($1, 'old', '', 60000)`, key).Scan(&token); err != nil || token == nil {
				t.Fatalf("old acquire: %v (token %v)", err, token)
			}
			b, err := pglock.New(pool, pglock.WithMode(pglock.LeaseMode))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if _, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); err == nil {
				t.Fatal("a try was granted a key the previous version's acquire holds")
			}
			// The permits' objects of version 6 were added.
			p, err := b.AcquirePermit(ctx, "migrate/permit/"+t.Name(), driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatalf("AcquirePermit after the migration: %v", err)
			}
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// The shared grants' objects of version 7 were added: a
			// reader is granted, listed, and keeps a session-mode writer
			// out.
			sb, err := pglock.New(pool)
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close()
			sharedKey := "migrate/shared/" + t.Name()
			r, err := sb.AcquireShared(ctx, sharedKey, driver.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatalf("AcquireShared after the migration: %v", err)
			}
			if hs, err := sb.Readers(ctx, sharedKey); err != nil || len(hs) != 1 || hs[0].Token != r.Token() {
				t.Fatalf("Readers after the migration: %+v, %v; want the reader", hs, err)
			}
			if _, err := sb.Acquire(ctx, sharedKey, driver.AcquireOptions{TTL: time.Minute}); err == nil {
				t.Fatal("a writer's try was granted a key a reader holds")
			}
			if err := r.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// The lease-mode readers of version 8: a reader is granted,
			// listed, and keeps out this version's writers and the
			// earlier versions' exclusive tries.
			leaseKey := "migrate/lease-shared/" + t.Name()
			lr, err := b.AcquireShared(ctx, leaseKey, driver.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatalf("lease-mode AcquireShared after the migration: %v", err)
			}
			if hs, err := b.Readers(ctx, leaseKey); err != nil || len(hs) != 1 || hs[0].Token != lr.Token() {
				t.Fatalf("lease-mode Readers after the migration: %+v, %v; want the reader", hs, err)
			}
			if _, err := b.Acquire(ctx, leaseKey, driver.AcquireOptions{TTL: time.Minute}); err == nil {
				t.Fatal("a lease-mode writer's try was granted a key a reader holds")
			}
			for _, sql := range []string{v7TrySQL, oldTrySQL} {
				if n := rawTry(t, pool, sql, leaseKey); n != 0 {
					t.Fatalf("an earlier version's exclusive try was granted token %d while a reader holds", n)
				}
			}
			if err := lr.Release(ctx); err != nil {
				t.Fatal(err)
			}
			s.exec(t, s.evil, shadowingFunctions["lock id per session"])
			checkExclusion(t, s, pglock.SessionMode)
		})
	}
}

// A schema of this version with one of its objects missing, a function
// whose search_path is not pinned (an operator's ALTER FUNCTION may leave
// it so), or a function of version 8 put back, is brought up to date by a Backend's first use, as a
// schema of an earlier version is: the clean-up of a lease try then
// leaves the try's tombstone, which a late try of it finds.
func TestMigrateRestoresObjects(t *testing.T) {
	for _, tc := range []struct{ name, change string }{
		{"tombstone table missing", "DROP TABLE distlock_lease_abandoned"},
		{"abandon missing", "DROP FUNCTION distlock_lease_abandon(text, text, bigint)"},
		{"abandon unpinned", "ALTER FUNCTION distlock_lease_abandon(text, text, bigint) RESET search_path"},
		{"wait unpinned", "ALTER FUNCTION distlock_lease_wait(text, text, text, bigint, bigint) RESET search_path"},
		// An earlier version's Migrate, run again, puts back functions
		// that compare expiries with now().
		{"permit acquire of version 8", v8Function(t, "distlock_permit_acquire")},
		{"lease wait of version 8", v8Function(t, "distlock_lease_wait")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, key := testCtx(t), "migrate/restore/"+t.Name()
			s := newSharedDB(t)
			s.exec(t, s.app, pglock.Schema)
			s.exec(t, s.app, tc.change)
			b := s.backend(t, s.app, pglock.WithMode(pglock.LeaseMode))
			if err := b.Abandon(ctx, key, "late", time.Minute); err != nil {
				t.Fatalf("Abandon: %v", err)
			}
			pool := s.pool(t, s.app)
			checkFunctions(t, pool)
			var late *int64
			if err := pool.QueryRow(ctx, `SELECT granted FROM distlock_lease_wait($1, 'late', '', 60000, 0)`, key).Scan(&late); err != nil {
				t.Fatal(err)
			}
			if late != nil {
				t.Errorf("a late try of the abandoned grant id was granted the key (token %d)", *late)
			}
		})
	}
}

// checkFunctions fails t if a function of the package in pool's database
// runs without the pinned search_path, or if one of lease-table mode or
// of the permits compares expiries with now() (see
// TestBackwardStepDuringLockWait).
func checkFunctions(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var unpinned, stale []string
	if err := pool.QueryRow(testCtx(t), `SELECT
	coalesce(array_agg(proname::text ORDER BY proname) FILTER (WHERE NOT coalesce(proconfig @> '{"search_path=pg_catalog, pg_temp"}', false)), '{}'),
	coalesce(array_agg(proname::text ORDER BY proname) FILTER (WHERE (proname LIKE 'distlock\_lease\_%' OR proname LIKE 'distlock\_permit\_%') AND prosrc LIKE '%now()%'), '{}')
FROM pg_proc WHERE proname LIKE 'distlock\_%' AND prokind = 'f'`).Scan(&unpinned, &stale); err != nil {
		t.Fatal(err)
	}
	if len(unpinned) > 0 {
		t.Errorf("functions without a pinned search_path after the migration: %v", unpinned)
	}
	if len(stale) > 0 {
		t.Errorf("functions comparing expiries with now() after the migration: %v", stale)
	}
}

// v8Function is the definition of function name in the schema of version
// 8, in schema public.
func v8Function(t *testing.T, name string) string {
	t.Helper()
	v8, err := os.ReadFile("testdata/schema-v8.sql")
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(schemaFunction(t, string(v8), name), "@schema@.", "public.")
}

// schemaFunction is the definition of function name in schema, the SQL of
// a version of Schema (naming the schema @schema@).
func schemaFunction(t *testing.T, schema, name string) string {
	t.Helper()
	i := strings.Index(schema, "CREATE OR REPLACE FUNCTION @schema@."+name+"(")
	if i < 0 {
		t.Fatalf("no function %s in the schema", name)
	}
	j := strings.Index(schema[i:], "\n$$;\n")
	return schema[i : i+j+len("\n$$;\n")]
}

// newPoolDSN is newPool for a DSN of another database.
func newPoolDSN(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// A schema of this version over which an earlier version's schema ran
// again (an earlier version's Migrate does that), putting back the
// functions that do not notify the watchers of a key, is brought up to
// date by a Backend's first use, in both modes: a watch is then woken by
// a grant.
func TestMigrateRestoresNotifications(t *testing.T) {
	pglock.SetWatchPoll(t, time.Hour)
	v4, err := os.ReadFile("testdata/schema-v4.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []pglock.Mode{pglock.SessionMode, pglock.LeaseMode} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx, key := testCtx(t), "migrate/notify/"+t.Name()
			s := newSharedDB(t)
			s.exec(t, s.app, pglock.Schema)
			s.exec(t, s.app, string(v4))
			opts := []pglock.Option{pglock.WithMode(mode)}
			if mode == pglock.LeaseMode {
				opts = append(opts, pglock.WithListen(s.dsn(s.app)))
			}
			watcher, holder := s.backend(t, s.app, opts...), s.backend(t, s.app, opts...)
			ch, err := watcher.WatchHolder(ctx, key)
			if err != nil {
				t.Fatalf("WatchHolder: %v", err)
			}
			l, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			expectWake(t, ch, "a grant")
		})
	}
}

// The migration works through PgBouncer in transaction mode when the
// server connection it lands on has run an earlier migration: each of
// several Backends, with pools of their own, finds the schema of an
// earlier version (a function dropped) and brings it up to date. Before,
// the migration's set_config was a named prepared statement, which stays
// on the server connection after its transaction; the next client's
// migration there failed with "prepared statement ... already exists",
// and so did `distlock partition`'s members started together.
func TestMigrateThroughPgBouncerTwice(t *testing.T) {
	ctx := testCtx(t)
	admin := newPool(t, server)
	db := "mig_" + strings.ToLower(rand.Text()[:10])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	direct := newPoolDSN(t, strings.Replace(server.DSN, "/postgres?", "/"+db+"?", 1))
	bouncer := testserver.StartPgBouncer(t, server)
	dsn := strings.Replace(bouncer.DSN, "/postgres?", "/"+db+"?", 1)
	for i := range 4 {
		if i > 0 {
			if _, err := direct.Exec(ctx, "DROP FUNCTION distlock_lease_abandon(text, text, bigint)"); err != nil {
				t.Fatal(err)
			}
		}
		b := newLeaseBackend(t, dsn)
		key := fmt.Sprintf("migrate/pgbouncer/%d", i)
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatalf("backend %d: the first acquire, which migrates: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("backend %d: release: %v", i, err)
		}
	}
}

// Fence.Admit works in a transaction through PgBouncer in transaction
// mode whatever the pool's own statement mode: it prepares nothing named.
// Before, with pgx's default (a named statement cached per connection),
// the second pool's Admit on the server connection where the first
// prepared it failed with "prepared statement ... already exists".
func TestFenceThroughPgBouncer(t *testing.T) {
	ctx := testCtx(t)
	if err := pglock.Migrate(ctx, newPool(t, server)); err != nil {
		t.Fatal(err)
	}
	bouncer := testserver.StartPgBouncer(t, server)
	var f pglock.Fence
	resource := "fence/pgbouncer/" + rand.Text()[:8]
	pools := []*pgxpool.Pool{newPoolDSN(t, bouncer.DSN+"&pool_max_conns=1"), newPoolDSN(t, bouncer.DSN+"&pool_max_conns=1")}
	for i := range 6 {
		err := pgx.BeginFunc(ctx, pools[i%2], func(tx pgx.Tx) error {
			return f.Admit(ctx, tx, resource, uint64(10+i))
		})
		if err != nil {
			t.Fatalf("admit %d through pool %d: %v", i, i%2, err)
		}
	}
}
