package pglock

import (
	"context"
	_ "embed" // Schema
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the SQL that creates the package's tables and functions
// (distlock_fence, distlock_resource, distlock_lease, distlock_lease_waiter,
// distlock_lease_abandoned, distlock_acquire, distlock_lease_acquire,
// distlock_lease_wait, distlock_lease_leave, distlock_lease_abandon,
// distlock_lease_refresh, distlock_lease_release, distlock_release,
// distlock_admit). It is idempotent. A Backend runs it on first use when
// they are missing; Migrate runs it explicitly, and an operator can run it
// with psql instead (it is the file schema.sql of this package), for
// example to let the Backend's role use the objects without the right to
// create them.
//
//go:embed schema.sql
var Schema string

// schemaCheckSQL reports whether the objects of Schema exist, as seen
// through the connection's search_path.
const schemaCheckSQL = `SELECT to_regclass('distlock_fence') IS NOT NULL
	AND to_regclass('distlock_resource') IS NOT NULL
	AND to_regclass('distlock_lease') IS NOT NULL
	AND to_regclass('distlock_lease_waiter') IS NOT NULL
	AND to_regclass('distlock_lease_abandoned') IS NOT NULL
	AND to_regprocedure('distlock_lease_acquire(text, text, text, bigint)') IS NOT NULL
	AND to_regprocedure('distlock_lease_wait(text, text, text, bigint, bigint)') IS NOT NULL
	AND to_regprocedure('distlock_lease_leave(text, text)') IS NOT NULL
	AND to_regprocedure('distlock_lease_abandon(text, text, bigint)') IS NOT NULL
	AND to_regprocedure('distlock_lease_refresh(text, text, bigint)') IS NOT NULL
	AND to_regprocedure('distlock_lease_release(text, text)') IS NOT NULL
	AND to_regprocedure('distlock_acquire(text, boolean, text, interval)') IS NOT NULL
	AND to_regprocedure('distlock_release(text, bigint, boolean)') IS NOT NULL
	AND to_regprocedure('distlock_admit(text, bigint)') IS NOT NULL`

// migrationLock serialises migrations (concurrent CREATE OR REPLACE
// FUNCTION statements can fail). It is an advisory lock of the two-int4
// form, a space of its own that no key's lock (the bigint form) can share;
// the lease tries and their clean-ups use the class after it (see
// distlock_lease_abandon).
const migrationLock = `SELECT pg_advisory_xact_lock(1685086060, 1)`

// Migrate creates the package's tables and functions in the database of
// pool if they are missing (see Schema).
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if pool == nil {
		return fmt.Errorf("pglock: migrate: nil pool")
	}
	return migrate(ctx, pool)
}

// schemaDB is what checking and creating the schema needs: a pool, or a
// connection of one. Both work through a pooler in transaction mode: the
// check is one statement without a named prepared statement, and the
// migration one transaction.
type schemaDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

func migrate(ctx context.Context, db schemaDB) error {
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, migrationLock); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, Schema)
		return err
	})
	if err != nil {
		return sortErr("create schema (see pglock.Schema)", err)
	}
	return nil
}

// schemaState runs the migration once per Backend, when the schema is
// missing.
type schemaState struct {
	turn chan struct{} // a token: whoever holds it checks; closed once done
	done chan struct{}
}

func (s *schemaState) init() {
	s.turn = make(chan struct{}, 1)
	s.turn <- struct{}{}
	s.done = make(chan struct{})
}

// ensure makes sure the schema exists, using db.
func (s *schemaState) ensure(ctx context.Context, db schemaDB) error {
	select {
	case <-s.done:
		return nil
	case <-s.turn:
	case <-ctx.Done():
		return ctx.Err()
	}
	var ok bool
	err := db.QueryRow(ctx, schemaCheckSQL, pgx.QueryExecModeExec).Scan(&ok)
	if err == nil && !ok {
		err = migrate(ctx, db)
	} else if err != nil {
		err = sortErr("check schema", err)
	}
	if err != nil {
		s.turn <- struct{}{}
		return err
	}
	close(s.done)
	return nil
}
