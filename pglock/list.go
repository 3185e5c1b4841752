package pglock

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
)

// listSQL lists the keys of the fence table whose advisory lock is held in
// this database by the session of their last grant (see lastGrantSQL),
// with the token, owner and time of that grant.
const listSQL = `SELECT f.key, f.token, f.owner, f.granted_at
FROM @schema@.distlock_fence f
WHERE pg_catalog.starts_with(f.key, $1::pg_catalog.text) AND EXISTS (
	SELECT 1 FROM pg_catalog.pg_locks l
	WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted AND l.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
		AND l.objsubid OPERATOR(pg_catalog.=) 1::pg_catalog.int2
		AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
		AND ((l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8)
			OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(f.key, 0::pg_catalog.int8)` + grantMarker + `)
ORDER BY f.key COLLATE pg_catalog."C"`

// List implements driver.Lister: the keys starting with prefix whose
// lock is held in the server, sorted by key, with the token, owner and
// grant time of the key's last grant through this package. pg_locks knows
// only lock ids, so the keys come from the fence table: a key is listed
// while the session of its last grant holds the lock and the grant is not
// released, so that neither the next grant, which holds the lock before
// its token commits, nor a session outside this package (psql's
// pg_advisory_lock), whose lock has no token, is listed with the last
// grant's token. On a schema of an earlier version, which records no
// grant's session, and for a grant made through an earlier version's
// distlock_acquire (which that version's Migrate puts back), a key is
// listed while any session holds its lock, and a key whose id collides
// with a held key's is listed as held too.
// Expires is always zero: grants have no time bound. The live shared
// grants of each key (see Readers) follow its exclusive holder, by token,
// with Shared set; a role that may not read distlock_reader (SELECT on
// the tables of an earlier version was granted before the migration that
// added it) lists the locks alone.
//
// In LeaseMode it lists the unexpired grants of distlock_lease, with
// Expires by the server's clock, and each key's unexpired readers of
// distlock_lease_reader after them, by token, with Shared set (a role
// that may not read distlock_lease_reader lists the grants alone).
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	if b.cfg.mode == LeaseMode {
		return b.listRows(ctx, prefix)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, sortErr("connect", err)
	}
	defer conn.Release()
	sql, err := b.schema.find(ctx, conn, "distlock_fence")
	if sql == nil {
		return nil, err // nil, nil: no lock was ever granted
	}
	if sql.listReaders != "" {
		hs, err := listWith(ctx, conn, sql.listReaders, prefix, true)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" { // insufficient_privilege
			return hs, err
		}
		// A role that may read the tables of an earlier version, but not
		// distlock_reader, which the migration to version 7 added: the
		// locks, without the readers.
	}
	return listWith(ctx, conn, sql.list, prefix, false)
}

// listWith runs List's query, whose rows have a last column Shared with
// shared.
func listWith(ctx context.Context, conn *pgxpool.Conn, query, prefix string, shared bool) ([]driver.Holder, error) {
	rows, err := conn.Query(ctx, query, prefix)
	if err != nil {
		return nil, sortErr("list", err)
	}
	defer rows.Close()
	var hs []driver.Holder
	for rows.Next() {
		var (
			h     driver.Holder
			token int64
			since time.Time
		)
		dest := []any{&h.Key, &token, &h.Owner, &since}
		if shared {
			dest = append(dest, &h.Shared)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, sortErr("list", err)
		}
		h.Token, h.Since = uint64(token), since
		hs = append(hs, h)
	}
	if err := rows.Err(); err != nil {
		return nil, sortErr("list", err)
	}
	return hs, nil
}
