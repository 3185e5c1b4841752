package pglock

// Shared (read) locks (driver.SharedLocks), in SessionMode (LeaseMode's
// are in leaseshared.go): see "Shared locks" in the package documentation
// and version 7 in schema.sql.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/driver"
)

var _ driver.SharedLocks = (*Backend)(nil)

const (
	// acquireSharedSQL is acquireSQL for a shared grant.
	acquireSharedSQL = `SELECT @schema@.distlock_acquire_shared($1::pg_catalog.text, $2::pg_catalog.bool, $3::pg_catalog.text, $4::pg_catalog.interval), pg_catalog.pg_backend_pid()`

	// releaseSharedSQL gives up the shared grant of $1 with token $2 held
	// by this session: it deletes the grant's row of distlock_reader and
	// unlocks the shared lock, in one statement and one transaction,
	// committed without waiting for its WAL flush (a row left by a crash
	// counts only while its session holds the lock). It reports false if
	// the session did not hold the lock shared.
	releaseSharedSQL = `WITH gone AS (
	DELETE FROM @schema@.distlock_reader r
	WHERE r.key OPERATOR(pg_catalog.=) $1::pg_catalog.text AND r.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
		AND r.token OPERATOR(pg_catalog.=) $2::pg_catalog.int8
	RETURNING 1
)
SELECT pg_catalog.pg_advisory_unlock_shared(pg_catalog.hashtextextended($1::pg_catalog.text, 0::pg_catalog.int8))
	AND pg_catalog.set_config('synchronous_commit', 'off', true) IS NOT NULL`

	// unlockSharedSQL gives up the key's shared lock without touching its
	// row: for a shared acquire that failed before its grant. It reports
	// false if the session did not hold the lock shared.
	unlockSharedSQL = `SELECT pg_catalog.pg_advisory_unlock_shared(pg_catalog.hashtextextended($1::pg_catalog.text, 0::pg_catalog.int8))`

	// heldSharedSQL is heldSQL for a shared grant.
	heldSharedSQL = `SELECT EXISTS (
	SELECT 1 FROM pg_catalog.pg_locks
	WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND granted
		AND mode OPERATOR(pg_catalog.=) 'ShareLock' AND objsubid OPERATOR(pg_catalog.=) 1::pg_catalog.int2
		AND database OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
		AND ((classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) objid::pg_catalog.int8)
			OPERATOR(pg_catalog.=) pg_catalog.hashtextextended($1::pg_catalog.text, 0::pg_catalog.int8))`

	// liveReaderSQL is the condition that the row r of distlock_reader is
	// a live shared grant: its session (r.pid) holds the key's lock shared
	// (pg_locks' ShareLock on the key's id), and is the grant's session,
	// not a later one that has its pid (pg_stat_activity.backend_start,
	// when the role may read it).
	liveReaderSQL = `EXISTS (
	SELECT 1 FROM pg_catalog.pg_locks l
	WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted AND l.mode OPERATOR(pg_catalog.=) 'ShareLock'
		AND l.objsubid OPERATOR(pg_catalog.=) 1::pg_catalog.int2 AND l.pid OPERATOR(pg_catalog.=) r.pid
		AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
		AND ((l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8)
			OPERATOR(pg_catalog.=) pg_catalog.hashtextextended(r.key, 0::pg_catalog.int8))
	AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid OPERATOR(pg_catalog.=) r.pid
		AND a.backend_start OPERATOR(pg_catalog.>) r.granted_at)`

	// readersSQL lists the live shared grants of exactly $1, by token.
	readersSQL = `SELECT r.token, r.owner, r.granted_at
FROM @schema@.distlock_reader r
WHERE r.key OPERATOR(pg_catalog.=) $1::pg_catalog.text AND ` + liveReaderSQL + `
ORDER BY r.token`

	// listMarker stands for listSQL in listWithReadersSQL.
	listMarker = "@list@"

	// listWithReadersSQL is listSQL with the live shared grants of the
	// keys, each after its key's exclusive holder and by token; its last
	// column says which rows are shared.
	listWithReadersSQL = `SELECT u.key, u.token, u.owner, u.granted_at, u.shared FROM (
	SELECT x.key, x.token, x.owner, x.granted_at, false AS shared FROM (` + listMarker + `) x
	UNION ALL
	SELECT r.key, r.token, r.owner, r.granted_at, true
	FROM @schema@.distlock_reader r
	WHERE pg_catalog.starts_with(r.key, $1::pg_catalog.text) AND ` + liveReaderSQL + `
) u
ORDER BY u.key COLLATE pg_catalog."C", u.shared, u.token`

	// readerOwnerSQL sets the owner $3 of the shared grant of $1 with
	// token $2, only while its session, with pid $4, holds the key's lock
	// shared.
	readerOwnerSQL = `UPDATE @schema@.distlock_reader r SET owner = $3::pg_catalog.text
WHERE r.key OPERATOR(pg_catalog.=) $1::pg_catalog.text AND r.token OPERATOR(pg_catalog.=) $2::pg_catalog.int8
	AND r.pid OPERATOR(pg_catalog.=) $4::pg_catalog.int4 AND ` + liveReaderSQL
)

// writerTurn is an exclusive acquirer's turn of a key in the Backend's
// queue. From before the acquirer queues until its turn is done, the key
// counts one more local writer (Backend.writers), which the key's shared
// acquirers of the Backend wait behind.
type writerTurn struct {
	*driver.Turn[*lease]
	b    *Backend
	once sync.Once
}

// Done passes the turn on and stops counting the writer. It does nothing
// on a nil turn (a shared grant's), or after the first call.
func (t *writerTurn) Done() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		t.Turn.Done()
		t.b.leaveWriter(t.Key())
	})
}

// enterWriter counts one more writer of key in b and, in the same step
// under b.wmu, takes its place in q, the Backend's queue of the key (its
// turn at once if nobody has it or waits for it): a reader that finds the
// writer counted (see readerPlace) is behind it in q, never between its
// count and its place. Without wait it takes the turn only if it is free,
// and otherwise counts nothing and reports false. The place's Wait must
// be called; the writer is counted until leaveWriter.
func enterWriter[V any](b *Backend, q *driver.Queue[V], key string, wait bool) (place *driver.Place[V], turn *driver.Turn[V], ok bool) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if wait {
		place = q.Enter(key)
	} else if turn, ok = q.Try(key); !ok {
		return nil, nil, false
	}
	if b.writers == nil {
		b.writers = map[string]int{}
	}
	b.writers[key]++
	return place, turn, true
}

// readerPlace is where a reader of key stands in q behind the Backend's
// writers of the key: nowhere (nil, true) if none is counted, a place in
// q, taken under b.wmu with the count it read, if one is and the reader
// waits, and (nil, false) if one is and the reader only tries. The
// reader passes the place's turn on as soon as it has it.
func readerPlace[V any](b *Backend, q *driver.Queue[V], key string, wait bool) (*driver.Place[V], bool) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	switch {
	case b.writers[key] == 0:
		return nil, true
	case !wait:
		return nil, false
	}
	return q.Enter(key), true
}

func (b *Backend) leaveWriter(key string) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if b.writers[key]--; b.writers[key] <= 0 {
		delete(b.writers, key)
	}
}

// AcquireShared implements driver.SharedLocks: in SessionMode a shared
// grant is pg_advisory_lock_shared(hashtextextended(key, 0)), the shared
// form of the lock Acquire takes, held on a connection taken from the pool
// for the grant's life, as a lock's is. It shares key with the Backend's
// other shared grants, and with psql's pg_advisory_lock_shared of the same
// id, and excludes (and is excluded by) Acquire's locks and psql's
// pg_advisory_lock of the id. It waits in the server's lock queue, which
// grants it when no exclusive lock is held and no exclusive request waits
// before it; a try (opts.Wait false) is pg_try_advisory_lock_shared, which
// fails by the same rule. Within the Backend, a shared acquirer of key
// that arrives while an Acquire of key holds or waits waits behind it,
// and its try fails. Its token is drawn from the key's counter, as a
// lock's, and its owner and grant time are recorded in distlock_reader
// (see Readers). It has no time bound (Validity TTL 0), is checked by
// Refresh, lost when its connection breaks (OnLost), and given back by
// Release, or, as Acquire's, when an AcquireShared that fails undoes it.
//
// In LeaseMode a shared grant is a row of distlock_lease_reader with its
// own expiry, by the server's clock, TTL from the grant, renewed by
// Refresh and deleted by Release, both owner-checked by the grant's id. It
// is granted while no unexpired exclusive lease holds key and no live
// writer waits before it in the key's queue, and keeps exclusive leases
// out until it is released or expires, by keeping the key's row of
// distlock_lease from expiring before it (so that the exclusive leases of
// every schema version exclude it); it waits in the key's queue with the
// writers (see "Waiting" in the package documentation). Its token is
// drawn from the key's counter.
func (b *Backend) AcquireShared(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	if b.cfg.mode == LeaseMode {
		return b.acquireRowShared(ctx, key, opts)
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()

	// The Backend's writers of key that came first go first: a try fails
	// while there is one, and a waiting reader queues behind them, and
	// passes the turn on as soon as it has it, asking the server then.
	place, ok := readerPlace(b, &b.queue, key, opts.Wait)
	if !ok {
		return nil, fmt.Errorf("%w: pglock: %q is held (or awaited) exclusively through this Backend", driver.ErrNotAcquired, key)
	}
	if place != nil {
		t, err := place.Wait(actx)
		if err != nil {
			return nil, b.endedErr(ctx)
		}
		t.Done()
	}
	l, err := b.grabShared(actx, key, opts)
	if err != nil {
		if actx.Err() != nil {
			return nil, b.endedErr(ctx)
		}
		return nil, err
	}
	return l, nil
}

// grabShared is grab for a shared grant.
func (b *Backend) grabShared(ctx context.Context, key string, opts driver.AcquireOptions) (*lease, error) {
	conn, err := b.conn(ctx, opts.Wait)
	if err != nil {
		return nil, err
	}
	sql, err := b.schema.ensure(ctx, conn)
	if err != nil {
		conn.Release()
		return nil, err
	}
	token, pid, err := b.lock(ctx, conn, sql, key, opts, true)
	if err != nil {
		return nil, err // lock discarded the connection
	}
	if token == 0 {
		conn.Release()
		return nil, fmt.Errorf("%w: pglock: %q is held, or awaited, exclusively", driver.ErrNotAcquired, key)
	}
	l := &lease{b: b, key: key, token: token, pid: pid, onLost: opts.OnLost, conn: conn, shared: true}
	if !b.register(l) {
		b.discard(conn)
		return nil, ErrClosed
	}
	return l, nil
}

// Readers implements driver.SharedLocks: the shared grants of exactly key
// whose sessions hold its lock shared (pg_locks' ShareLock on the key's
// id), with the token, owner and grant time recorded in distlock_reader,
// by token. A session outside the package that holds the id shared
// (psql's pg_advisory_lock_shared) has no token and is not listed. In
// LeaseMode they are the unexpired rows of distlock_lease_reader of key,
// with their expiry (see readersRows).
func (b *Backend) Readers(ctx context.Context, key string) ([]driver.Holder, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	if b.cfg.mode == LeaseMode {
		return b.readersRows(ctx, key)
	}
	sql, err := b.schema.find(ctx, b.pool, "distlock_reader")
	if sql == nil {
		return nil, err // nil, nil: no shared lock was ever granted
	}
	rows, err := b.pool.Query(ctx, sql.readers, pgx.QueryExecModeExec, key)
	if err != nil {
		return nil, sortErr("readers", err)
	}
	defer rows.Close()
	var hs []driver.Holder
	for rows.Next() {
		var (
			token int64
			since time.Time
		)
		h := driver.Holder{Key: key, Shared: true}
		if err := rows.Scan(&token, &h.Owner, &since); err != nil {
			return nil, sortErr("readers", err)
		}
		h.Token, h.Since = uint64(token), since
		hs = append(hs, h)
	}
	if err := rows.Err(); err != nil {
		return nil, sortErr("readers", err)
	}
	return hs, nil
}

// setReaderOwner is SetOwner for a shared grant.
func (l *lease) setReaderOwner(ctx context.Context, owner string, pid int32) error {
	sql, err := l.b.schema.find(ctx, l.b.pool, "distlock_reader")
	if sql == nil {
		if err == nil {
			err = errors.New("no table distlock_reader")
		}
		return fmt.Errorf("pglock: set owner: %w", err)
	}
	tag, err := l.b.pool.Exec(ctx, sql.readerOwner, pgx.QueryExecModeExec, l.key, int64(l.token), owner, pid)
	if err != nil {
		return sortErr("set owner", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: pglock: %q (shared, token %d) is no longer held by its session", driver.ErrLockLost, l.key, l.token)
	}
	return nil
}
