package bench

import (
	"context"
	"fmt"

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
			"the token incremented in the same statement (distlock_acquire), distlock_release; a waiter waits in the server's queue",
		Measures: Latency | Throughput | Contention,
		Open:     openDistlockPG,
		Counters: pgCounters,
	}
	distlockPGLeaseSubject = Subject{
		ID: "distlock-pg-lease", Name: "distlock PostgreSQL, lease mode (Client.Acquire)", Service: SvcPG, Kind: KindDistlock,
		NotBuilt: "lease mode not merged yet",
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
