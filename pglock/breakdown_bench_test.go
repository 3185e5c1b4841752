package pglock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// breakdownStep is one way of taking and giving back a lock on one
// connection, for BenchmarkCycleBreakdown.
type breakdownStep struct {
	name  string
	cycle func(ctx context.Context, key string) error
}

// BenchmarkCycleBreakdown takes the session-mode cycle apart: variants of
// the acquire and release statements, from two SELECT 1 to the Client,
// run in turn on a server of their own with pg_stat_statements (nested
// statements too) and track_functions, so that the client's view (the
// p50 of each variant, per cycle) and the server's (mean execution time
// per statement) can be set side by side. Run it alone:
//
//	CI=true go test -run '^$' -bench CycleBreakdown -benchtime 3000x ./pglock/
func BenchmarkCycleBreakdown(b *testing.B) {
	ctx := context.Background()
	srv := testserver.StartPostgres(b, testserver.WithPostgresSettings(
		"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all",
		"pg_stat_statements.track_utility=off", "track_functions=all"))
	pool := newPool(b, srv, "pool_max_conns=8")
	if err := pglock.Migrate(ctx, pool); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, breakdownSQL); err != nil {
		b.Fatal(err)
	}
	be, err := pglock.New(newPool(b, srv, "pool_max_conns=8"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	c := newClient(b, be)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	exec := func(sql string, args ...any) error {
		_, err := conn.Exec(ctx, sql, args...)
		return err
	}
	scalar := func(sql string, args ...any) error {
		var v any
		return conn.QueryRow(ctx, sql, args...).Scan(&v)
	}
	// releaseWith is the release statement of the package's earlier
	// versions (a WITH); markUpdate sends the one it sends now (an UPDATE).
	const releaseWith = `WITH released AS (
	UPDATE distlock_fence SET held = false WHERE key = $1 AND token = $2 RETURNING 1)
SELECT pg_advisory_unlock(hashtextextended($1, 0))
FROM pg_try_advisory_xact_lock(hashtextextended($1, 0)) x, (SELECT count(*) FROM released) r,
	set_config('synchronous_commit', 'off', true) s`
	acquireThen := func(acquire string, args func(key string) []any, unlock func(key string, token int64) error) func(context.Context, string) error {
		return func(ctx context.Context, key string) error {
			var token int64
			if err := conn.QueryRow(ctx, acquire, args(key)...).Scan(&token); err != nil {
				return err
			}
			return unlock(key, token)
		}
	}
	fnArgs := func(key string) []any { return []any{key, true, "", time.Second} }
	keyArg := func(key string) []any { return []any{key} }
	plainUnlock := func(key string, _ int64) error {
		return scalar(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key)
	}
	markWith := func(key string, token int64) error { return scalar(releaseWith, key, token) }
	markUpdate := func(key string, token int64) error { return scalar(pglock.ReleaseSQL, key, token) }
	steps := []breakdownStep{
		{"2x SELECT 1", func(ctx context.Context, _ string) error {
			if err := exec(`SELECT 1`); err != nil {
				return err
			}
			return exec(`SELECT 1`)
		}},
		{"raw lock, unlock", func(ctx context.Context, key string) error {
			if err := exec(`SELECT pg_advisory_lock(hashtextextended($1, 0))`, key); err != nil {
				return err
			}
			return plainUnlock(key, 0)
		}},
		{"lock and UPDATE in one statement, unlock", acquireThen(`WITH l AS MATERIALIZED (SELECT pg_advisory_lock(hashtextextended($1, 0)))
UPDATE distlock_fence f SET token = f.token + 1 FROM l WHERE f.key = $1 RETURNING f.token`, keyArg, plainUnlock)},
		{"the same committed asynchronously, unlock", acquireThen(`WITH l AS MATERIALIZED (SELECT pg_advisory_lock(hashtextextended($1, 0)), set_config('synchronous_commit', 'off', true))
UPDATE distlock_fence f SET token = f.token + 1 FROM l WHERE f.key = $1 RETURNING f.token`, keyArg, plainUnlock)},
		{"SQL-language acquire, unlock", acquireThen(`SELECT breakdown_acquire_sql($1)`, keyArg, plainUnlock)},
		{"minimal PL/pgSQL acquire, unlock", acquireThen(`SELECT breakdown_acquire_min($1)`, keyArg, plainUnlock)},
		{"minimal PL/pgSQL acquire, release WITH", acquireThen(`SELECT breakdown_acquire_min($1)`, keyArg, markWith)},
		{"minimal PL/pgSQL acquire, release UPDATE", acquireThen(`SELECT breakdown_acquire_min($1)`, keyArg, markUpdate)},
		{"distlock_acquire, release WITH", acquireThen(`SELECT distlock_acquire($1, $2, $3, $4)`, fnArgs, markWith)},
		{"distlock_acquire, release UPDATE", acquireThen(`SELECT distlock_acquire($1, $2, $3, $4)`, fnArgs, markUpdate)},
		{"Backend", func(ctx context.Context, key string) error {
			l, err := be.Acquire(ctx, key, driver.AcquireOptions{TTL: distlock.DefaultTTL, Wait: true})
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{"Client", func(ctx context.Context, key string) error {
			l, err := c.Acquire(ctx, key)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
	}
	// Every key's row exists (and is released) before the timing starts.
	for i, s := range steps {
		key := fmt.Sprintf("breakdown/%d", i)
		if _, err := pool.Exec(ctx, `INSERT INTO distlock_fence (key, token) VALUES ($1, 1) ON CONFLICT DO NOTHING`, key); err != nil {
			b.Fatal(err)
		}
		if err := s.cycle(ctx, key); err != nil {
			b.Fatalf("%s: %v", s.name, err)
		}
	}
	if _, err := pool.Exec(ctx, `SELECT pg_stat_statements_reset(), pg_stat_reset()`); err != nil {
		b.Fatal(err)
	}
	samples := make([][]time.Duration, len(steps))
	b.ResetTimer()
	// The variants take turns in a new order each round, so that none
	// always follows the same one.
	order := make([]int, len(steps))
	for i := range order {
		order[i] = i
	}
	for b.Loop() {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			s := steps[i]
			t0 := time.Now()
			if err := s.cycle(ctx, fmt.Sprintf("breakdown/%d", i)); err != nil {
				b.Fatalf("%s: %v", s.name, err)
			}
			samples[i] = append(samples[i], time.Since(t0))
		}
	}
	b.StopTimer()
	for i, s := range steps {
		slices.Sort(samples[i])
		b.Logf("client p50 %8.1f µs  %s", float64(samples[i][len(samples[i])/2].Nanoseconds())/1000, s.name)
	}
	logServerStats(b, pool)
}

// logServerStats logs pg_stat_statements' mean execution time per
// statement (top-level and nested) and the functions' times.
func logServerStats(b *testing.B, pool *pgxpool.Pool) {
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT toplevel, calls, total_exec_time / calls, total_plan_time / calls, shared_blks_hit / calls::float8, wal_records / calls::float8, query
FROM pg_stat_statements WHERE calls > 100 ORDER BY toplevel DESC, total_exec_time DESC`)
	if err != nil {
		b.Fatal(err)
	}
	type row struct {
		top           bool
		calls         int64
		exec, plan    float64
		hits, walRecs float64
		query         string
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.top, &x.calls, &x.exec, &x.plan, &x.hits, &x.walRecs, &x.query)
		return x, err
	})
	if err != nil {
		b.Fatal(err)
	}
	for _, x := range list {
		q := strings.Join(strings.Fields(x.query), " ")
		if len(q) > 110 {
			q = q[:110]
		}
		b.Logf("server top=%v calls %6d exec %7.1f µs plan %5.1f µs hits %4.1f wal %3.1f  %s", x.top, x.calls, x.exec*1000, x.plan*1000, x.hits, x.walRecs, q)
	}
	var upd, hot int64
	if err := pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'distlock_fence'`).Scan(&upd, &hot); err != nil {
		b.Fatal(err)
	}
	b.Logf("distlock_fence: %d updates, %d of them HOT", upd, hot)
	frows, err := pool.Query(ctx, `SELECT funcname, calls, total_time / calls, self_time / calls FROM pg_stat_user_functions WHERE calls > 0 ORDER BY funcname`)
	if err != nil {
		b.Fatal(err)
	}
	for frows.Next() {
		var name string
		var calls int64
		var total, self float64
		if err := frows.Scan(&name, &calls, &total, &self); err != nil {
			b.Fatal(err)
		}
		b.Logf("function %s: calls %d total %.1f µs self %.1f µs", name, calls, total*1000, self*1000)
	}
	if err := frows.Err(); err != nil {
		b.Fatal(err)
	}
}

// breakdownSQL defines the variants of distlock_acquire that
// BenchmarkCycleBreakdown compares with it: its common path alone, in SQL
// and in PL/pgSQL.
const breakdownSQL = `
CREATE OR REPLACE FUNCTION breakdown_acquire_sql(lock_key text) RETURNS bigint LANGUAGE sql AS $$
    SELECT pg_advisory_lock(hashtextextended(lock_key, 0));
    UPDATE distlock_fence f SET token = f.token + 1, owner = '', granted_at = clock_timestamp(), held = true
    WHERE f.key = lock_key RETURNING f.token;
$$;
CREATE OR REPLACE FUNCTION breakdown_acquire_min(lock_key text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE granted bigint;
BEGIN
    PERFORM pg_advisory_lock(hashtextextended(lock_key, 0));
    UPDATE distlock_fence f SET token = f.token + 1, owner = '', granted_at = clock_timestamp(), held = true
    WHERE f.key = lock_key RETURNING f.token INTO granted;
    RETURN granted;
END $$;
`
