package pglock

// The holder of one key: read, and its owner changed.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.HolderReader  = (*Backend)(nil)
	_ driver.HolderWatcher = (*Backend)(nil)
	_ driver.OwnerSetter   = (*lease)(nil)
	_ driver.OwnerSetter   = (*rowLease)(nil)
)

const (
	// heldLockSQL is the condition, in pg_locks l, that the advisory lock
	// of the key f.key is granted: the condition of listSQL.
	heldLockSQL = `l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted AND l.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
		AND l.objsubid OPERATOR(pg_catalog.=) 1::pg_catalog.int2
		AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
		AND ((l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8)
			OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(f.key, 0::pg_catalog.int8)`

	// lastGrantSQL narrows heldLockSQL, in listSQL and holderSQL, to the
	// session of the key's last grant while that grant is not released:
	// not the next grant's session, which holds the lock before its token
	// commits and, after a lost grant, for the loss grace, nor a session
	// outside the package (psql's pg_advisory_lock), whose lock has no
	// token. Otherwise a reader woken by a release could read the released
	// grant's token again, held by its successor. The session is f.pid
	// only while f.pid_token is the key's token: a grant through an
	// earlier version's distlock_acquire (put back by that version's
	// Migrate while this one runs, or made before version 5) leaves the
	// pid of an earlier grant, and its key is then held while any session
	// holds the lock, as on a schema of an earlier version. A session that
	// started after the grant (pg_stat_activity.backend_start, when the
	// role may read it) has the grant's pid reused, and is not its session.
	lastGrantSQL = ` AND f.held AND (f.pid_token OPERATOR(pg_catalog.<>) f.token OR (l.pid OPERATOR(pg_catalog.=) f.pid
		AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid OPERATOR(pg_catalog.=) f.pid
			AND a.backend_start OPERATOR(pg_catalog.>) f.granted_at)))`

	// grantMarker stands for lastGrantSQL, or nothing on a schema of an
	// earlier version (see newStatements).
	grantMarker = "@grant@"

	// holderSQL reads the key $1 as listSQL lists keys.
	holderSQL = `SELECT f.token, f.owner, f.granted_at
FROM @schema@.distlock_fence f
WHERE f.key OPERATOR(pg_catalog.=) $1::pg_catalog.text AND EXISTS (
	SELECT 1 FROM pg_catalog.pg_locks l WHERE ` + heldLockSQL + grantMarker + `)`

	// setOwnerSQL sets the owner $3 of the grant of $1 with token $2,
	// only while the session with pid $4 holds the key's lock, and
	// notifies the key's watchers.
	setOwnerSQL = `UPDATE @schema@.distlock_fence f SET owner = $3::pg_catalog.text
WHERE f.key OPERATOR(pg_catalog.=) $1::pg_catalog.text AND f.token OPERATOR(pg_catalog.=) $2::pg_catalog.int8 AND EXISTS (
	SELECT 1 FROM pg_catalog.pg_locks l WHERE l.pid OPERATOR(pg_catalog.=) $4::pg_catalog.int4 AND ` + heldLockSQL + `)
RETURNING ` + notifyWatched

	// rowHolderSQL reads the key $1 as rowListSQL lists keys.
	rowHolderSQL = `SELECT f.token, l.owner, l.granted_at, l.expires
FROM @schema@.distlock_lease l JOIN @schema@.distlock_fence f ON f.key OPERATOR(pg_catalog.=) l.key
WHERE l.key OPERATOR(pg_catalog.=) $1::pg_catalog.text AND l.grant_id IS NOT NULL
	AND l.expires OPERATOR(pg_catalog.>) pg_catalog.now()`

	// rowSetOwnerSQL sets the owner $3 of the grant $2 of $1, only while
	// the key's row names it and it has not expired, and notifies the
	// key's watchers.
	rowSetOwnerSQL = `UPDATE @schema@.distlock_lease l SET owner = $3::pg_catalog.text
WHERE l.key OPERATOR(pg_catalog.=) $1::pg_catalog.text AND l.grant_id OPERATOR(pg_catalog.=) $2::pg_catalog.text
	AND l.expires OPERATOR(pg_catalog.>) pg_catalog.now()
RETURNING ` + notifyWatched
)

// Holder implements driver.HolderReader with the view of List, for one
// key: in session mode the token, owner and grant time of the key's last
// grant while its advisory lock is held (Expires zero), in lease mode its
// unexpired grant, with Expires by the server's clock. It reads that key
// only: "svc/leader" is never "svc/leader2".
func (b *Backend) Holder(ctx context.Context, key string) (driver.Holder, bool, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Holder{}, false, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return driver.Holder{}, false, err
	}
	names, query := []string{"distlock_fence"}, func(s *statements) string { return s.holder }
	if b.cfg.mode == LeaseMode {
		names, query = []string{"distlock_lease", "distlock_fence"}, func(s *statements) string { return s.rowHolder }
	}
	sql, err := b.schema.find(ctx, b.pool, names...)
	if sql == nil {
		return driver.Holder{}, false, err // nil: no lock was ever granted
	}
	h := driver.Holder{Key: key}
	var token int64
	dest := []any{&token, &h.Owner, &h.Since}
	if b.cfg.mode == LeaseMode {
		dest = append(dest, &h.Expires)
	}
	err = b.pool.QueryRow(ctx, query(sql), pgx.QueryExecModeExec, key).Scan(dest...)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return driver.Holder{}, false, nil
	case err != nil:
		return driver.Holder{}, false, sortErr("holder", err)
	}
	h.Token = uint64(token)
	return h, true, nil
}

// SetOwner implements driver.OwnerSetter: it updates the owner in the
// key's row of distlock_fence, only while the row has the grant's token
// and the session that holds the grant's connection holds the key's lock
// (pg_locks). It needs UPDATE on distlock_fence. A shared grant's owner
// is in its row of distlock_reader, which it updates as well, while the
// session holds the key's lock shared; that needs UPDATE on
// distlock_reader.
func (l *lease) SetOwner(ctx context.Context, owner string) error {
	l.mu.Lock()
	if l.conn == nil {
		defer l.mu.Unlock()
		return l.endedLocked()
	}
	pid := l.pid // pg_backend_pid(), which a pooler does not announce
	l.mu.Unlock()
	if l.shared {
		return l.setReaderOwner(ctx, owner, pid)
	}
	sql, err := l.b.schema.find(ctx, l.b.pool, "distlock_fence")
	if sql == nil {
		if err == nil {
			err = errors.New("no table distlock_fence")
		}
		return fmt.Errorf("pglock: set owner: %w", err)
	}
	tag, err := l.b.pool.Exec(ctx, sql.setOwner, pgx.QueryExecModeExec, l.key, int64(l.token), owner, pid)
	if err != nil {
		return sortErr("set owner", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: pglock: %q (token %d) is no longer held by its session", driver.ErrLockLost, l.key, l.token)
	}
	return nil
}

// SetOwner implements driver.OwnerSetter: it updates the owner in the
// key's row of distlock_lease, only while the row names the grant and has
// not expired. It needs UPDATE on distlock_lease. A reader's owner is in
// its row of distlock_lease_reader, updated only while it has not expired
// (UPDATE on distlock_lease_reader); that notifies no watcher.
func (l *rowLease) SetOwner(ctx context.Context, owner string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.end != nil {
		return l.endedLocked()
	}
	setOwner := l.b.schema.sql.rowSetOwner
	if l.shared {
		setOwner = l.b.schema.sql.rowReaderOwner
	}
	tag, err := l.b.pool.Exec(ctx, setOwner, pgx.QueryExecModeExec, l.key, l.grant, owner)
	if err != nil {
		return sortErr("set owner", err)
	}
	if tag.RowsAffected() == 0 {
		return l.endLocked(l.lostErr("it had expired, or was taken after it expired"))
	}
	return nil
}
