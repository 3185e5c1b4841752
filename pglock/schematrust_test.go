package pglock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
)

// sharedDB is a database of its own on the test server, as PostgreSQL
// before 15 makes every database: any role may create objects in schema
// public (GRANT CREATE ON SCHEMA public TO PUBLIC). app is the role the
// application connects as, a plain role; evil is another plain role.
type sharedDB struct {
	name      string
	app, evil string
	admin     *pgxpool.Pool // as the superuser
}

// newSharedDB creates the database and the two roles, dropped when the
// test ends.
func newSharedDB(t *testing.T) *sharedDB {
	t.Helper()
	ctx := testCtx(t)
	suffix := strings.ToLower(rand.Text()[:10])
	s := &sharedDB{name: "shared_" + suffix, app: "app_" + suffix, evil: "evil_" + suffix}
	root := newPool(t, server)
	for _, sql := range []string{
		"CREATE ROLE " + s.app + " LOGIN",
		"CREATE ROLE " + s.evil + " LOGIN",
		"CREATE DATABASE " + s.name,
	} {
		if _, err := root.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, sql := range []string{
			"DROP DATABASE IF EXISTS " + s.name + " WITH (FORCE)",
			"DROP ROLE IF EXISTS " + s.app,
			"DROP ROLE IF EXISTS " + s.evil,
		} {
			if _, err := root.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	s.admin = s.pool(t, "postgres")
	if _, err := s.admin.Exec(ctx, "GRANT CREATE ON SCHEMA public TO PUBLIC"); err != nil {
		t.Fatal(err)
	}
	return s
}

// dsn is the DSN of the database for role, with settings appended.
func (s *sharedDB) dsn(role string, settings ...string) string {
	dsn := strings.Replace(server.DSN, "/postgres?", "/"+s.name+"?", 1)
	dsn = strings.Replace(dsn, "://postgres@", "://"+role+"@", 1)
	for _, v := range settings {
		dsn += "&" + v
	}
	return dsn
}

// pool returns a pool of connections as role, closed when the test ends.
func (s *sharedDB) pool(t *testing.T, role string, settings ...string) *pgxpool.Pool {
	t.Helper()
	return newPoolDSN(t, s.dsn(role, settings...))
}

// backend returns a Backend of role over a pool of its own.
func (s *sharedDB) backend(t *testing.T, role string, opts ...pglock.Option) *pglock.Backend {
	t.Helper()
	b, err := pglock.New(s.pool(t, role), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// functions describes the functions of the database's schema public, with
// their settings and bodies.
func (s *sharedDB) functions(t *testing.T) string {
	t.Helper()
	var d string
	if err := s.admin.QueryRow(testCtx(t), `SELECT coalesce(string_agg(p.oid::regprocedure::text || ' ' || coalesce(p.proconfig::text, '') || md5(p.prosrc), E'\n' ORDER BY p.oid::regprocedure::text), '')
FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace`).Scan(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// exec runs sql as role.
func (s *sharedDB) exec(t *testing.T, role, sql string) {
	t.Helper()
	c, err := pgx.Connect(testCtx(t), s.dsn(role))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(testCtx(t), sql); err != nil {
		t.Fatalf("as %s: %s: %v", role, sql, err)
	}
}

// shadowingFunctions are functions and operators that another role can
// create in schema public, each an exact match for a call of the schema's
// functions before version 4 (which ran with the caller's search_path)
// where pg_catalog's needs a cast of an argument.
var shadowingFunctions = map[string]string{
	// hashtextextended(key, 0) with its integer literal, preferred over
	// pg_catalog's (text, bigint): a lock id of its own for each session.
	"lock id per session": `
CREATE FUNCTION public.hashtextextended(k text, seed integer) RETURNS bigint LANGUAGE sql AS
$$ SELECT pg_catalog.hashtextextended(k, seed::int8) # pg_catalog.pg_backend_pid() $$`,
	// The same, winding the key's token back to 1 each time it is called.
	"tokens wound back": `
CREATE FUNCTION public.hashtextextended(k text, seed integer) RETURNS bigint LANGUAGE sql AS
$$ UPDATE public.distlock_fence SET token = 1 WHERE key = k;
   SELECT pg_catalog.hashtextextended(k, seed::int8) $$`,
	// bigint * interval (pg_catalog has float8 * interval only): every
	// lease has expired when it is granted.
	"leases born expired": `
CREATE FUNCTION public.bigint_times_interval(bigint, interval) RETURNS interval LANGUAGE sql AS
$$ SELECT interval '-1 hour' $$;
CREATE OPERATOR public.* (LEFTARG = bigint, RIGHTARG = interval, FUNCTION = public.bigint_times_interval)`,
}

// Functions and operators that another role creates in schema public,
// where the functions of the schema found built-in ones before
// (CVE-2018-1058), change nothing: no second holder while a key is held,
// no token given twice, no lease try done after its clean-up. The hostile
// code would run as the application's role.
func TestShadowingObjectsChangeNothing(t *testing.T) {
	exclusion := func(mode pglock.Mode) func(*testing.T, *sharedDB) {
		return func(t *testing.T, s *sharedDB) { checkExclusion(t, s, mode) }
	}
	for _, tc := range []struct {
		name    string
		objects string // in shadowingFunctions
		check   func(t *testing.T, s *sharedDB)
	}{
		{"lock id per session", "lock id per session", exclusion(pglock.SessionMode)},
		{"tokens wound back", "tokens wound back", exclusion(pglock.SessionMode)},
		{"leases born expired", "leases born expired", exclusion(pglock.LeaseMode)},
		{"tombstones born expired", "leases born expired", checkTombstones},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			s := newSharedDB(t)
			if err := pglock.Migrate(ctx, s.pool(t, s.app)); err != nil {
				t.Fatal(err)
			}
			s.exec(t, s.evil, shadowingFunctions[tc.objects])
			tc.check(t, s)
		})
	}
}

// checkTombstones fails t if a lease try of s's app role that reaches the
// server after its clean-up is granted the key, once the clean-up of
// another try of the key has deleted the key's expired tombstones.
func checkTombstones(t *testing.T, s *sharedDB) {
	t.Helper()
	ctx := testCtx(t)
	key := "hijack/" + t.Name()
	b := s.backend(t, s.app, pglock.WithMode(pglock.LeaseMode))
	for _, grant := range []string{"late", "next"} {
		if err := b.Abandon(ctx, key, grant, time.Minute); err != nil {
			t.Fatalf("clean-up of %s: %v", grant, err)
		}
	}
	var late *int64
	if err := s.pool(t, s.app).QueryRow(ctx, `SELECT granted FROM public.distlock_lease_wait($1::text, 'late', '', 60000::int8, 0::int8)`, key).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if late != nil {
		t.Errorf("a try that reached the server after its clean-up was granted the key (token %d): its tombstone was gone", *late)
	}
}

// checkExclusion fails t if two Backends of s's app role both hold one
// key, or if a key's tokens do not increase.
func checkExclusion(t *testing.T, s *sharedDB, mode pglock.Mode) {
	t.Helper()
	ctx := testCtx(t)
	key := "hijack/" + t.Name()
	b1 := s.backend(t, s.app, pglock.WithMode(mode))
	b2 := s.backend(t, s.app, pglock.WithMode(mode))
	var last uint64
	for i := range 3 {
		l, err := b1.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		if l.Token() <= last {
			t.Errorf("grant %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		if other, err := b2.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); err == nil {
			t.Errorf("grant %d: a second holder (token %d) while the first (token %d) holds the key", i, other.Token(), l.Token())
			other.Release(ctx)
		} else if !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("grant %d: second try: %v, want ErrNotAcquired", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
}

// A schema that another role installed, or that another role's schema
// holds, is refused by Acquire and Fence with an error that names the
// role; without the refusal its owner could give two holders one token.
func TestForeignOwnedSchemaRefused(t *testing.T) {
	// fakeAcquire grants every acquire token 1 without locking anything.
	const fakeAcquire = `
CREATE OR REPLACE FUNCTION %sdistlock_acquire(lock_key text, wait boolean, lock_owner text, loss_grace interval)
RETURNS bigint LANGUAGE sql AS $$ SELECT 1::bigint $$`
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, s *sharedDB) []string // the app's pool settings
		owner func(s *sharedDB) string                 // the role the error names
	}{
		{"installed by another role", func(t *testing.T, s *sharedDB) []string {
			s.exec(t, s.evil, pglock.Schema)
			s.exec(t, s.evil, fmt.Sprintf(fakeAcquire, "public."))
			return nil
		}, func(s *sharedDB) string { return s.evil }},
		{"in another role's schema", func(t *testing.T, s *sharedDB) []string {
			s.exec(t, "postgres", "GRANT CREATE ON DATABASE "+s.name+" TO "+s.evil)
			s.exec(t, s.evil, "CREATE SCHEMA locks; GRANT USAGE, CREATE ON SCHEMA locks TO PUBLIC")
			settings := []string{"search_path=locks"}
			// The application installs the schema there itself...
			if err := pglock.Migrate(testCtx(t), s.pool(t, s.app, settings...)); err != nil {
				t.Log(err)
			}
			// ...and the schema's owner replaces a function.
			s.exec(t, s.evil, "DROP FUNCTION IF EXISTS locks.distlock_acquire(text, boolean, text, interval)")
			s.exec(t, s.evil, fmt.Sprintf(fakeAcquire, "locks."))
			return settings
		}, func(s *sharedDB) string { return s.evil }},
		// A schema of an earlier version, where another role added an
		// object of this version before the application's migration.
		{"tombstone table planted", func(t *testing.T, s *sharedDB) []string {
			s.exec(t, s.app, schemaV3(t))
			s.exec(t, s.evil, "CREATE TABLE public.distlock_lease_abandoned (key text, grant_id text, until timestamptz, PRIMARY KEY (key, grant_id))")
			return nil
		}, func(s *sharedDB) string { return s.evil }},
		{"abandon planted", func(t *testing.T, s *sharedDB) []string {
			s.exec(t, s.app, schemaV3(t))
			s.exec(t, s.evil, "CREATE FUNCTION public.distlock_lease_abandon(text, text, bigint) RETURNS void LANGUAGE sql AS ''")
			return nil
		}, func(s *sharedDB) string { return s.evil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			s := newSharedDB(t)
			settings := tc.setup(t, s)
			key := "foreign/" + t.Name()
			for i := range 2 {
				b, err := pglock.New(s.pool(t, s.app, settings...))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
				if err == nil {
					// Kept until the test ends, so that a second grant
					// shows as two holders.
					t.Errorf("backend %d: granted token %d", i, l.Token())
					continue
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.owner(s))) || !strings.Contains(err.Error(), "owned by") {
					t.Errorf("backend %d: %v; want a refusal naming the owner %q", i, err, tc.owner(s))
				}
			}
			err := pgx.BeginFunc(ctx, s.pool(t, s.app, settings...), func(tx pgx.Tx) error {
				return pglock.NewFence().Admit(ctx, tx, "foreign/resource", 1)
			})
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.owner(s))) {
				t.Errorf("Fence: %v; want a refusal naming the owner %q", err, tc.owner(s))
			}
		})
	}
}

// schemaV3 is the schema of version 3, in testdata.
func schemaV3(t *testing.T) string {
	t.Helper()
	old, err := os.ReadFile("testdata/schema-v3.sql")
	if err != nil {
		t.Fatal(err)
	}
	return string(old)
}

// A table of the session's temporary schema named as one of the schema's
// (which PostgreSQL searches first for tables when search_path does not
// place it) changes nothing: a new session still gets a token above the
// last one. Only code on the application's own connections can create
// one.
func TestTemporaryTableChangesNothing(t *testing.T) {
	for _, mode := range []pglock.Mode{pglock.SessionMode, pglock.LeaseMode} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := testCtx(t)
			s := newSharedDB(t)
			if err := pglock.Migrate(ctx, s.pool(t, s.app)); err != nil {
				t.Fatal(err)
			}
			key := "temp/" + t.Name()
			var last uint64
			for i := range 2 {
				cfg, err := pgxpool.ParseConfig(s.dsn(s.app))
				if err != nil {
					t.Fatal(err)
				}
				cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
					_, err := c.Exec(ctx, `CREATE TEMPORARY TABLE distlock_fence (LIKE public.distlock_fence INCLUDING ALL);
CREATE TEMPORARY TABLE distlock_lease (LIKE public.distlock_lease INCLUDING ALL)`)
					return err
				}
				pool, err := pgxpool.NewWithConfig(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(pool.Close)
				b, err := pglock.New(pool, pglock.WithMode(mode))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
				if err != nil {
					t.Fatalf("backend %d: %v", i, err)
				}
				if l.Token() <= last {
					t.Errorf("backend %d: token %d after %d", i, l.Token(), last)
				}
				last = l.Token()
				if err := l.Release(ctx); err != nil {
					t.Fatalf("backend %d: release: %v", i, err)
				}
			}
		})
	}
}
