package torture

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// pgStore keeps a PGFenced Store's registers in a PostgreSQL table, one row
// per resource, and fences each write with pglock.Fence in the transaction
// that makes it: the guide's fenced storage for data kept in PostgreSQL.
// The Store still serializes its requests (its History is recorded in
// arrival order), so this checks that the fence refuses a stale token
// atomically with the write, not its behaviour under concurrent writers,
// which pglock's own tests race.
type pgStore struct {
	pool  *pgxpool.Pool
	fence *pglock.Fence
}

// pgStoreTable holds the registers of PGFenced stores. Resource names are
// unique per run, so runs sharing a server do not meet.
const pgStoreTable = `CREATE TABLE IF NOT EXISTS torture_register (resource text PRIMARY KEY, value bigint NOT NULL)`

// pgStoreTimeout bounds one request of the Store to PostgreSQL.
const pgStoreTimeout = 10 * time.Second

// usePostgres makes the Store keep its registers in srv, fenced by
// pglock.Fence. It must be called before the Store serves a request.
func (s *Store) usePostgres(srv *testserver.Postgres) error {
	if srv == nil {
		return errors.New("torture: store: no PostgreSQL server for the pg-fenced store")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, srv.DSN)
	if err != nil {
		return fmt.Errorf("torture: store: %w", err)
	}
	if err := pglock.Migrate(ctx, pool); err != nil {
		pool.Close()
		return fmt.Errorf("torture: store: %w", err)
	}
	if _, err := pool.Exec(ctx, pgStoreTable); err != nil {
		pool.Close()
		return fmt.Errorf("torture: store: %w", err)
	}
	s.mu.Lock()
	s.pg = &pgStore{pool: pool, fence: pglock.NewFence()}
	s.mu.Unlock()
	return nil
}

func (p *pgStore) close() { p.pool.Close() }

// read returns resource's value (0 if never written).
func (p *pgStore) read(resource string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgStoreTimeout)
	defer cancel()
	var v int64
	err := p.pool.QueryRow(ctx, `SELECT value FROM torture_register WHERE resource = $1`, resource).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("torture: store: read: %w", err)
	}
	return v, nil
}

// write sets resource to value in one transaction fenced with token. A
// refused token reports stale and the highest token admitted; the
// transaction is then rolled back, so the value is unchanged.
func (p *pgStore) write(resource string, token uint64, value int64) (stale bool, highest uint64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), pgStoreTimeout)
	defer cancel()
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if err := p.fence.Admit(ctx, tx, resource, token); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO torture_register (resource, value) VALUES ($1, $2)
			ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value`, resource, value)
		return err
	})
	var se *fence.StaleTokenError
	switch {
	case errors.As(err, &se):
		return true, se.Highest, nil
	case err != nil:
		return false, 0, fmt.Errorf("torture: store: write: %w", err)
	}
	return false, 0, nil
}
