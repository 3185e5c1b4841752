package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/pglock"
)

// pgPoolConns is the size of every PostgreSQL subject's pool: a held lock
// keeps its connection, so a pool smaller than the throughput run's 64
// goroutines would measure the pool, not the lock.
const pgPoolConns = 64

// The PostgreSQL rows.
var (
	pgSelectSubject = Subject{
		ID: "pg-select", Name: "PostgreSQL SELECT 1 (one round trip)", Service: SvcPG, Kind: KindRoundTrip,
		Settings: "pgx v5.12.0 pool, Exec of SELECT 1 (a pool connection taken and given back around it)", Measures: Latency,
		Open: func(e *Env) (Locker, error) {
			pool, err := e.PostgresPool(context.Background(), pgPoolConns)
			if err != nil {
				return nil, err
			}
			return funcLocker{lock: func(ctx context.Context, _ string) (Unlock, error) {
				_, err := pool.Exec(ctx, "SELECT 1")
				return noUnlock, err
			}, close: func() error { pool.Close(); return nil }}, nil
		},
		Counters: pgCounters,
	}
	pgAdvisorySubject = Subject{
		ID: "pg-advisory", Name: "raw pg_advisory_lock / pg_advisory_unlock", Service: SvcPG, Kind: KindFloor,
		Settings: "the server's own lock and queue: a pool connection (pgx v5.12.0, 64 connections), SELECT pg_advisory_lock(hashtextextended(key, 0)), " +
			"then pg_advisory_unlock on the same connection, which goes back to the pool; a waiter waits in the server's queue; no token",
		Measures: Latency | Throughput | Contention,
		Open:     openPGAdvisory,
		Counters: pgCounters,
	}
	distlockPGSubject = Subject{
		ID: "distlock-pg", Name: "distlock PostgreSQL, session mode (Client.Acquire)", Service: SvcPG, Kind: KindDistlock,
		Settings: "pglock defaults over a pgx pool of 64 connections: the session advisory lock of hashtextextended(key, 0) on a pool connection kept for the grant, " +
			"the token incremented in the same statement (distlock_acquire), a release that marks the grant released and unlocks in one statement (an UPDATE whose RETURNING calls pg_advisory_unlock); a waiter waits in the server's queue",
		Measures: Latency | Throughput | Contention | Election | Semaphore,
		Open:     openDistlockPG,
		Counters: pgCounters,
	}
	distlockPGLeaseSubject = Subject{
		ID: "distlock-pg-lease", Name: "distlock PostgreSQL, lease mode (Client.Acquire)", Service: SvcPG, Kind: KindDistlock,
		Settings: "pglock WithMode(LeaseMode) over a pgx pool of 64 direct connections, WithListen on a direct session of its own: the key's row of distlock_lease " +
			"won by one statement that also increments the token (distlock_lease_wait), an expiry by the server's clock renewed by the Client's watchdog (TTL 15s), " +
			"distlock_lease_release, which sends NOTIFY naming the head of the key's FIFO queue of waiter rows; only that waiter tries again, or any when the grant expires, or at a poll (every 1s with LISTEN, which renews its row); " +
			"the LISTEN session's statements are not counted (one LISTEN per process)",
		Measures: Latency | Throughput | Contention | Semaphore,
		Open:     func(e *Env) (Locker, error) { return openDistlockPGLease(e, false) },
		Counters: pgCounters,
	}
	pgSelectBouncerSubject = Subject{
		ID: "pg-select-bouncer", Name: "PostgreSQL SELECT 1 through PgBouncer (one round trip)", Service: SvcPG, Kind: KindRoundTrip,
		Settings: "PgBouncer 1.18 in transaction mode (20 server connections) in front of the same server; pgx v5.12.0 pool of 64 connections to it, " +
			"Exec of SELECT 1 as an unnamed statement (QueryExecModeExec, as lease mode sends its statements: a bouncer's server connection keeps no prepared statement for its clients)",
		Measures: Latency,
		Open: func(e *Env) (Locker, error) {
			pool, err := e.PgBouncerPool(context.Background(), pgPoolConns)
			if err != nil {
				return nil, err
			}
			return funcLocker{lock: func(ctx context.Context, _ string) (Unlock, error) {
				_, err := pool.Exec(ctx, "SELECT 1", pgx.QueryExecModeExec)
				return noUnlock, err
			}, close: func() error { pool.Close(); return nil }}, nil
		},
		Counters: pgCounters,
	}
	distlockPGLeaseBouncerSubject = Subject{
		ID: "distlock-pg-lease-bouncer", Name: "distlock PostgreSQL, lease mode through PgBouncer (Client.Acquire)", Service: SvcPG, Kind: KindDistlock,
		Settings: "as lease mode, with the pool of 64 connections to PgBouncer 1.18 in transaction mode (20 server connections), the deployment lease mode is for; " +
			"WithListen on a direct session with the server, which the bouncer cannot keep",
		Measures: Latency | Throughput | Contention | Semaphore,
		Open:     func(e *Env) (Locker, error) { return openDistlockPGLease(e, true) },
		Counters: pgCounters,
	}
)

func pgCounters(ctx context.Context, e *Env) (Snapshot, error) { return e.PostgresSnapshot(ctx) }

// pgAdvisoryLocker is the raw advisory lock on connections of one pool.
type pgAdvisoryLocker struct{ pool *pgxpool.Pool }

func openPGAdvisory(e *Env) (Locker, error) {
	pool, err := e.PostgresPool(context.Background(), pgPoolConns)
	if err != nil {
		return nil, err
	}
	return &pgAdvisoryLocker{pool: pool}, nil
}

func (p *pgAdvisoryLocker) Lock(ctx context.Context, key string) (Unlock, error) {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended($1, 0))", key); err != nil {
		// The session may hold the lock after all (a reply lost, a
		// cancel too late): closing it gives up whatever it holds.
		_ = conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
		return nil, err
	}
	return func(ctx context.Context) error {
		defer conn.Release()
		var unlocked bool
		err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key).Scan(&unlocked)
		if err == nil && !unlocked {
			err = fmt.Errorf("bench: pg_advisory_unlock: %q was not held", key)
		}
		if err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		return err
	}, nil
}

func (p *pgAdvisoryLocker) Close() error {
	p.pool.Close()
	return nil
}

func openDistlockPG(e *Env) (Locker, error) {
	pool, err := e.PostgresPool(context.Background(), pgPoolConns)
	if err != nil {
		return nil, err
	}
	b, err := pglock.New(pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return newDistlockLocker(b, false, func() error {
		err := b.Close()
		pool.Close() // after the Backend, which gives its connections back
		return err
	})
}

// openDistlockPGLease opens a lease-mode Backend whose pool reaches the
// server directly, or through the PgBouncer; its LISTEN session is always
// direct.
func openDistlockPGLease(e *Env, bouncer bool) (Locker, error) {
	newPool := e.PostgresPool
	if bouncer {
		newPool = e.PgBouncerPool
	}
	pool, err := newPool(context.Background(), pgPoolConns)
	if err != nil {
		return nil, err
	}
	b, err := pglock.New(pool, pglock.WithMode(pglock.LeaseMode), pglock.WithListen(e.Postgres()))
	if err != nil {
		pool.Close()
		return nil, err
	}
	return newDistlockLocker(b, false, func() error {
		err := b.Close() // frees the rows still held, through the pool
		pool.Close()
		return err
	})
}
