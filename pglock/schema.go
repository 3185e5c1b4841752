package pglock

import (
	"context"
	_ "embed" // Schema
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Schema is the SQL that creates the package's tables and functions
// (distlock_fence, distlock_resource, distlock_lease, distlock_lease_waiter,
// distlock_lease_abandoned, distlock_acquire, distlock_lease_acquire,
// distlock_lease_wait, distlock_lease_leave, distlock_lease_abandon,
// distlock_lease_refresh, distlock_lease_release, distlock_release,
// distlock_admit, and the permits' distlock_semaphore, distlock_permit,
// distlock_permit_waiter, distlock_permit_acquire, distlock_permit_wake,
// distlock_permit_refresh, distlock_permit_release, distlock_permit_leave,
// distlock_permit_abandon, the shared grants' distlock_reader and
// distlock_acquire_shared, and the lease-mode readers'
// distlock_lease_reader, distlock_lease_acquire_shared,
// distlock_lease_refresh_shared, distlock_lease_release_shared and
// distlock_lease_wake_readers) in the current schema (the first of the
// search_path),
// or brings those of an earlier version up to date. It is idempotent. A
// Backend runs it on first use when they are missing or of an earlier
// version; Migrate runs it explicitly, and an operator can run it with
// psql instead (it is the file schema.sql of this package), for example to
// let the Backend's role use the objects without the right to create them.
//
//go:embed schema.sql
var Schema string

// schemaMarker stands for the schema that holds the package's objects in
// the SQL of this package, which names each of them with its schema.
const schemaMarker = "@schema@"

// staleClock is the start time of the transaction, which the functions
// of lease-table mode and of the permits of version 8 and earlier compared
// expiries with; version 9's read clock_timestamp() instead, and one that
// still reads staleClock is of an earlier version (see schema.sql).
const staleClock = "pg_catalog.now()"

// pinnedPath is the search_path every function of Schema runs with (in
// pg_proc.proconfig); a function without it is of an earlier version.
const pinnedPath = "search_path=pg_catalog, pg_temp"

// locateSQL finds the schema that holds the package's objects: the first
// schema of the search_path that has a table distlock_fence, else the
// first schema of the search_path, where Migrate creates them (never
// pg_catalog, nor the session's temporary schema). It returns a row per
// object of Schema, missing or not, with the facts ensure decides on: who
// owns the schema and the object, whether each is trusted (see
// trustedOwner), and whether a function has the pinned search_path. It
// reads the catalogs only, and names everything with its schema, operators
// included: it runs with the session's search_path, which may lead to
// objects of other roles. A function of this version is pinned and, where
// the wanted list gives a body, has it in its source: the functions that
// notify the watchers of a key (version 5) name their channel, which an
// earlier version's schema, run again by an earlier version's Migrate,
// takes out; those that wake lease-mode readers (version 8) name
// distlock_lease_wake_readers; and the readers' own functions name
// readers_until, which a draft of them, reverted before any release, did
// not have. Its last column says whether a function of lease-table mode
// or of the permits (distlock_lease_* and distlock_permit_*) reads
// staleClock, as those of version 8 and earlier do.
var locateSQL = `WITH me AS (
	SELECT r.oid, r.rolname, r.rolsuper, d.datdba
	FROM pg_catalog.pg_roles r, pg_catalog.pg_database d
	WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER
		AND d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()
), target AS (
	SELECT n.oid, n.nspname, n.nspowner
	FROM pg_catalog.unnest(pg_catalog.current_schemas(false)) WITH ORDINALITY AS p(name, pos)
	JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) p.name
	WHERE n.oid OPERATOR(pg_catalog.<>) pg_catalog.pg_my_temp_schema()
		AND n.nspname OPERATOR(pg_catalog.<>) 'pg_catalog'
	ORDER BY EXISTS (
		SELECT FROM pg_catalog.pg_class c
		WHERE c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) 'distlock_fence'
	) DESC, p.pos
	LIMIT 1
), wanted(kind, name, args, body) AS (VALUES
	('table', 'distlock_fence', NULL, NULL),
	('column', 'distlock_fence.watched_until', NULL, NULL),
	('column', 'distlock_fence.pid', NULL, NULL),
	('column', 'distlock_fence.pid_token', NULL, NULL),
	('table', 'distlock_resource', NULL, NULL),
	('table', 'distlock_lease', NULL, NULL),
	('column', 'distlock_lease.watched_until', NULL, NULL),
	('table', 'distlock_lease_waiter', NULL, NULL),
	('table', 'distlock_lease_abandoned', NULL, NULL),
	('function', 'distlock_acquire', 'text, boolean, text, interval', '` + holderChannel + `'),
	('procedure', 'distlock_release', 'text, bigint, boolean', NULL),
	('function', 'distlock_lease_acquire', 'text, text, text, bigint', '` + holderChannel + `'),
	('function', 'distlock_lease_wait', 'text, text, text, bigint, bigint', 'distlock_lease_wake_readers'),
	('function', 'distlock_lease_leave', 'text, text', 'distlock_lease_wake_readers'),
	('function', 'distlock_lease_abandon', 'text, text, bigint', 'distlock_lease_release_shared'),
	('function', 'distlock_lease_refresh', 'text, text, bigint', NULL),
	('function', 'distlock_lease_release', 'text, text', 'distlock_lease_wake_readers'),
	('function', 'distlock_admit', 'text, bigint', NULL),
	('table', 'distlock_semaphore', NULL, NULL),
	('table', 'distlock_permit', NULL, NULL),
	('table', 'distlock_permit_waiter', NULL, NULL),
	('function', 'distlock_permit_wake', 'text', NULL),
	('function', 'distlock_permit_acquire', 'text, text, text, bigint, integer, boolean, bigint', NULL),
	('function', 'distlock_permit_refresh', 'text, text, bigint', NULL),
	('function', 'distlock_permit_release', 'text, text', NULL),
	('function', 'distlock_permit_leave', 'text, text', NULL),
	('function', 'distlock_permit_abandon', 'text, text, bigint', NULL),
	('table', 'distlock_reader', NULL, NULL),
	('function', 'distlock_acquire_shared', 'text, boolean, text, interval', NULL),
	('table', 'distlock_lease_reader', NULL, NULL),
	('function', 'distlock_lease_wake_readers', 'text, text', NULL),
	('function', 'distlock_lease_acquire_shared', 'text, text, text, bigint, bigint', 'readers_until'),
	('function', 'distlock_lease_refresh_shared', 'text, text, bigint', 'readers_until'),
	('function', 'distlock_lease_release_shared', 'text, text', 'readers_until')
), found AS (
	SELECT c.relname AS name, '' AS args, c.relowner AS owner, NULL::pg_catalog.text[] AS config, NULL::pg_catalog.text AS src
	FROM pg_catalog.pg_class c, target t
	WHERE c.relnamespace OPERATOR(pg_catalog.=) t.oid
	UNION ALL
	-- The columns of version 5, which its functions read.
	SELECT (c.relname OPERATOR(pg_catalog.||) '.') OPERATOR(pg_catalog.||) a.attname, '', c.relowner, NULL, NULL
	FROM pg_catalog.pg_attribute a
	JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) a.attrelid
	JOIN target t ON c.relnamespace OPERATOR(pg_catalog.=) t.oid
	WHERE c.relname OPERATOR(pg_catalog.=) ANY ('{distlock_fence,distlock_lease}'::pg_catalog.name[])
		AND a.attnum OPERATOR(pg_catalog.>) 0::pg_catalog.int2 AND NOT a.attisdropped
	UNION ALL
	SELECT p.proname, pg_catalog.oidvectortypes(p.proargtypes), p.proowner, p.proconfig, p.prosrc
	FROM pg_catalog.pg_proc p, target t
	WHERE p.pronamespace OPERATOR(pg_catalog.=) t.oid
)
SELECT me.rolname, t.nspname, so.rolname,
	t.nspowner OPERATOR(pg_catalog.=) me.datdba
		-- pg_database_owner (PostgreSQL 14 and later) owns public.
		OR t.nspowner OPERATOR(pg_catalog.=) COALESCE(pg_catalog.to_regrole('pg_database_owner')::pg_catalog.oid, 0::pg_catalog.oid)
		OR ` + trustedOwner("t.nspowner") + `,
	w.kind, w.name, w.args, o.rolname,
	f.owner IS NOT NULL AND (` + trustedOwner("f.owner") + `),
	f.config IS NOT NULL AND '` + pinnedPath + `' OPERATOR(pg_catalog.=) ANY (f.config)
		AND (w.body IS NULL OR pg_catalog.strpos(f.src, w.body) OPERATOR(pg_catalog.>) 0),
	f.src IS NOT NULL AND (pg_catalog.starts_with(w.name, 'distlock_lease_') OR pg_catalog.starts_with(w.name, 'distlock_permit_'))
		AND pg_catalog.strpos(f.src, '` + staleClock + `') OPERATOR(pg_catalog.>) 0
FROM me, target t
JOIN pg_catalog.pg_roles so ON so.oid OPERATOR(pg_catalog.=) t.nspowner
CROSS JOIN wanted w
LEFT JOIN found f ON f.name OPERATOR(pg_catalog.=) w.name AND f.args OPERATOR(pg_catalog.=) COALESCE(w.args, '')
LEFT JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) f.owner`

// trustedOwner is the condition on the role owner, in locateSQL, under
// which the objects it owns are used: the connecting role, a role it is a
// member of, a superuser, or the database's owner. A superuser session
// trusts only itself and other superusers: it would otherwise run, with a
// superuser's rights, code that a role without them wrote.
func trustedOwner(owner string) string {
	return strings.NewReplacer("OWNER", owner).Replace(`OWNER OPERATOR(pg_catalog.=) me.oid
		OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) OWNER)
		OR (NOT me.rolsuper AND (OWNER OPERATOR(pg_catalog.=) me.datdba OR pg_catalog.pg_has_role(me.oid, OWNER, 'MEMBER')))`)
}

// located is what locateSQL found.
type located struct {
	schema   string          // the schema's name, quoted; "" if the search_path names none
	present  map[string]bool // the objects that exist, by name
	missing  bool            // some object is missing
	outdated bool            // some function is of an earlier version (or unpinned)
	// clocked is set when a function of lease-table mode or of the
	// permits reads staleClock (version 8 and earlier): outdated, but
	// still notifying the watchers of a key.
	clocked bool
}

// has reports whether all of names exist.
func (f *located) has(names ...string) bool {
	return !slices.ContainsFunc(names, func(n string) bool { return !f.present[n] })
}

// queryer runs a query: a pool, a connection or a transaction.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// locate finds the schema of the package's objects (see locateSQL), and
// refuses it, or any of the objects in it, when a role that the
// connecting role does not trust owns it: that role could run its own
// code as the connecting role, through a function it replaced or a table
// it made a view. The query is one statement without a named prepared
// statement, so that it works through a pooler in transaction mode.
func locate(ctx context.Context, db queryer) (*located, error) {
	rows, err := db.Query(ctx, locateSQL, pgx.QueryExecModeExec)
	if err != nil {
		return nil, sortErr("check schema", err)
	}
	defer rows.Close()
	f := &located{present: map[string]bool{}}
	for rows.Next() {
		var (
			me, schema, schemaOwner, kind, name string
			args, owner                         *string
			schemaTrusted, trusted, pinned      bool
			clocked                             bool
		)
		if err := rows.Scan(&me, &schema, &schemaOwner, &schemaTrusted, &kind, &name, &args, &owner, &trusted, &pinned, &clocked); err != nil {
			return nil, sortErr("check schema", err)
		}
		if f.schema == "" {
			f.schema = pgx.Identifier{schema}.Sanitize()
			if !schemaTrusted {
				return nil, untrusted(me, "schema "+f.schema+", where the package's objects are,", schemaOwner)
			}
		}
		what := kind + " " + f.schema + "." + name
		if args != nil {
			what += "(" + *args + ")"
		}
		switch {
		case owner == nil:
			f.missing = true
		case !trusted:
			return nil, untrusted(me, what, *owner)
		default:
			f.present[name] = true
			f.outdated = f.outdated || kind == "function" && !pinned
			f.clocked = f.clocked || kind == "function" && clocked
		}
	}
	if err := rows.Err(); err != nil {
		return nil, sortErr("check schema", err)
	}
	return f, nil
}

// untrusted is the error of an object owned by a role the connecting role
// me does not trust.
func untrusted(me, what, owner string) error {
	return fmt.Errorf("pglock: %s is owned by role %q, not by %q, a role it is a member of, the database's owner or a superuser; refusing it, since its owner could run code as %q through it (see pglock.Schema)",
		what, owner, me, me)
}

// statements are the statements of a Backend, naming the objects of the
// schema it found.
type statements struct {
	schema string // quoted

	acquire, release, list, holder, setOwner                                                  string // SessionMode
	rowAcquire, rowLeave, rowAbandon, rowRefresh, rowRelease, rowList, rowHolder, rowSetOwner string // LeaseMode
	mark, rowMark                                                                             string // watchers' marks

	permitAcquire, permitRefresh, permitRelease, permitLeave, permitAbandon, permits string // permits, both modes

	acquireShared, releaseShared, readers, readerOwner string // shared grants, SessionMode
	listReaders                                        string // listWithReadersSQL; "" on a schema without distlock_reader

	rowAcquireShared, rowRefreshShared, rowReleaseShared, rowReaders, rowReaderOwner string // shared grants, LeaseMode
	rowListReaders                                                                   string // rowListWithReadersSQL; "" on a schema without distlock_lease_reader
}

func newStatements(f *located) *statements {
	s := &statements{schema: f.schema}
	s.acquire, s.release, s.list = s.qualified(acquireSQL), s.qualified(releaseSQL), s.qualified(listSQL)
	s.rowAcquire, s.rowLeave, s.rowAbandon = s.qualified(rowAcquireSQL), s.qualified(rowLeaveSQL), s.qualified(rowAbandonSQL)
	s.rowRefresh, s.rowRelease, s.rowList = s.qualified(rowRefreshSQL), s.qualified(rowReleaseSQL), s.qualified(rowListSQL)
	// The grant's session is known from version 5 on; Holder and List
	// read a schema of an earlier version too, which they do not migrate.
	grant := ""
	if f.present["distlock_fence.pid_token"] {
		grant = lastGrantSQL
	}
	s.list = s.qualified(strings.ReplaceAll(listSQL, grantMarker, grant))
	s.holder = s.qualified(strings.ReplaceAll(holderSQL, grantMarker, grant))
	s.setOwner = s.qualified(setOwnerSQL)
	s.rowHolder, s.rowSetOwner = s.qualified(rowHolderSQL), s.qualified(rowSetOwnerSQL)
	s.mark, s.rowMark = s.qualified(markSQL), s.qualified(rowMarkSQL)
	s.permitAcquire, s.permitRefresh, s.permitRelease = s.qualified(permitAcquireSQL), s.qualified(permitRefreshSQL), s.qualified(permitReleaseSQL)
	s.permitLeave, s.permitAbandon, s.permits = s.qualified(permitLeaveSQL), s.qualified(permitAbandonSQL), s.qualified(permitsSQL)
	s.acquireShared, s.releaseShared = s.qualified(acquireSharedSQL), s.qualified(releaseSharedSQL)
	s.readers, s.readerOwner = s.qualified(readersSQL), s.qualified(readerOwnerSQL)
	s.rowAcquireShared, s.rowRefreshShared, s.rowReleaseShared = s.qualified(rowAcquireSharedSQL), s.qualified(rowRefreshSharedSQL), s.qualified(rowReleaseSharedSQL)
	s.rowReaders, s.rowReaderOwner = s.qualified(rowReadersSQL), s.qualified(rowReaderOwnerSQL)
	if f.present["distlock_lease_reader"] {
		s.rowListReaders = s.qualified(rowListWithReadersSQL)
	}
	if f.present["distlock_reader"] {
		s.listReaders = s.qualified(strings.ReplaceAll(listWithReadersSQL, listMarker, strings.ReplaceAll(listSQL, grantMarker, grant)))
	}
	return s
}

// qualified returns sql with the schema's name in place of schemaMarker.
func (s *statements) qualified(sql string) string {
	return strings.ReplaceAll(sql, schemaMarker, s.schema)
}

// migrationLock serialises migrations (concurrent CREATE OR REPLACE
// FUNCTION statements can fail). It is an advisory lock of the two-int4
// form, a space of its own that no key's lock (the bigint form) can share;
// the lease tries and their clean-ups use the class after it (see
// distlock_lease_abandon).
const migrationLock = `SELECT pg_catalog.pg_advisory_xact_lock(1685086060, 1)`

// Migrate creates the package's tables and functions in the database of
// pool if they are missing, and brings those of an earlier version up to
// date (see Schema). It refuses, without changing anything, objects or a
// schema that a role the pool's role does not trust owns (see the package
// documentation).
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if pool == nil {
		return fmt.Errorf("pglock: migrate: nil pool")
	}
	f, err := locate(ctx, pool)
	if err != nil {
		return err
	}
	_, err = migrate(ctx, pool, f.schema)
	return err
}

// schemaDB is what checking and creating the schema needs: a pool, or a
// connection of one. Both work through a pooler in transaction mode: the
// check is one statement without a named prepared statement, and the
// migration one transaction whose statements prepare nothing named (a
// named one would stay on the server connection after the transaction,
// and the next client's migration there would fail to prepare it again).
type schemaDB interface {
	queryer
	Begin(ctx context.Context) (pgx.Tx, error)
}

// migrate runs Schema in schema (quoted), and checks what it made before
// it commits: a table that another role created meanwhile would have been
// kept (CREATE TABLE IF NOT EXISTS).
func migrate(ctx context.Context, db schemaDB, schema string) (*located, error) {
	if schema == "" {
		return nil, fmt.Errorf("pglock: create schema: the search_path names no schema that exists to create the package's objects in")
	}
	var f *located
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, migrationLock); err != nil {
			return err
		}
		// Schema creates the objects in the current schema.
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('search_path', $1, true)`, pgx.QueryExecModeExec, schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, Schema); err != nil {
			return err
		}
		var err error
		f, err = locate(ctx, tx)
		switch {
		case err != nil:
			return err
		case f.schema != schema || f.missing || f.outdated || f.clocked:
			return fmt.Errorf("pglock: create schema: the objects in %s are still missing or of an earlier version", schema)
		}
		return nil
	})
	if err != nil {
		return nil, sortErr("create schema (see pglock.Schema)", err)
	}
	return f, nil
}

// schemaState runs the migration once per Backend, when the schema is
// missing or of an earlier version, and keeps the statements of the
// schema found.
type schemaState struct {
	turn chan struct{} // a token: whoever holds it checks; closed once done
	done chan struct{}
	sql  *statements // set before done is closed
}

func (s *schemaState) init() {
	s.turn = make(chan struct{}, 1)
	s.turn <- struct{}{}
	s.done = make(chan struct{})
}

// ensure makes sure the schema exists and is of this version, using db,
// and returns its statements.
func (s *schemaState) ensure(ctx context.Context, db schemaDB) (*statements, error) {
	select {
	case <-s.done:
		return s.sql, nil
	case <-s.turn:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f, err := locate(ctx, db)
	if err == nil && (f.missing || f.outdated || f.clocked) {
		f, err = migrate(ctx, db, f.schema)
	}
	if err != nil {
		s.turn <- struct{}{}
		return nil, err
	}
	s.sql = newStatements(f)
	close(s.done)
	return s.sql, nil
}

// find returns the statements of the schema for reading its tables, names,
// without creating or changing anything: nil when one of them is missing.
func (s *schemaState) find(ctx context.Context, db queryer, names ...string) (*statements, error) {
	select {
	case <-s.done:
		return s.sql, nil
	default:
	}
	f, err := locate(ctx, db)
	if err != nil || !f.has(names...) {
		return nil, err
	}
	return newStatements(f), nil
}
