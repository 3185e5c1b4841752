package pglock

// Shared (read) locks in LeaseMode: see "Shared locks" in the package
// documentation and version 8 in schema.sql.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/driver"
)

const (
	// readerPrefix starts the grant id of every lease-mode reader, which
	// also names it in the key's queue (distlock_lease_waiter), where
	// the schema's functions tell readers from writers by it.
	readerPrefix = "shared:"

	// rowAcquireSharedSQL is rowAcquireSQL for a reader (see
	// distlock_lease_acquire_shared in schema.sql).
	rowAcquireSharedSQL = `SELECT granted, retry_ms FROM @schema@.distlock_lease_acquire_shared($1::pg_catalog.text, $2::pg_catalog.text,
	$3::pg_catalog.text, $4::pg_catalog.int8, $5::pg_catalog.int8)`

	// rowRefreshSharedSQL extends the reader $2 of key $1 to $3 ms from
	// the server's clock, if it has not expired.
	rowRefreshSharedSQL = `SELECT @schema@.distlock_lease_refresh_shared($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8)`

	// rowReleaseSharedSQL frees the reader $2 of key $1 if it has not
	// expired, waking a waiting writer when it was the last.
	rowReleaseSharedSQL = `SELECT @schema@.distlock_lease_release_shared($1::pg_catalog.text, $2::pg_catalog.text)`

	// rowReadersSQL lists the unexpired readers of exactly $1, by token.
	rowReadersSQL = `SELECT r.token, r.owner, r.granted_at, r.expires
FROM @schema@.distlock_lease_reader r
WHERE r.key OPERATOR(pg_catalog.=) $1::pg_catalog.text AND r.expires OPERATOR(pg_catalog.>) pg_catalog.now()
ORDER BY r.token`

	// rowListWithReadersSQL is rowListSQL with the unexpired readers of
	// the keys, each after its key's exclusive holder and by token; its
	// last column says which rows are shared.
	rowListWithReadersSQL = `SELECT u.key, u.token, u.owner, u.granted_at, u.expires, u.shared FROM (
	SELECT x.key, x.token, x.owner, x.granted_at, x.expires, false AS shared FROM (` + rowListSQL + `) x
	UNION ALL
	SELECT r.key, r.token, r.owner, r.granted_at, r.expires, true
	FROM @schema@.distlock_lease_reader r
	WHERE pg_catalog.starts_with(r.key, $1::pg_catalog.text) AND r.expires OPERATOR(pg_catalog.>) pg_catalog.now()
) u
ORDER BY u.key COLLATE pg_catalog."C", u.shared, u.token`

	// rowReaderOwnerSQL sets the owner $3 of the reader $2 of key $1,
	// only while it has not expired.
	rowReaderOwnerSQL = `UPDATE @schema@.distlock_lease_reader r SET owner = $3::pg_catalog.text
WHERE r.key OPERATOR(pg_catalog.=) $1::pg_catalog.text AND r.grant_id OPERATOR(pg_catalog.=) $2::pg_catalog.text
	AND r.expires OPERATOR(pg_catalog.>) pg_catalog.now()`
)

// acquireRowShared is AcquireShared in lease-table mode. Readers take no
// turn of the key in the Backend: they overlap freely, and only the
// Backend's writers of the key that came first (holding or waiting) go
// first, as in session mode.
func (b *Backend) acquireRowShared(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()

	place, ok := readerPlace(b, &b.rowQueue, key, opts.Wait)
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
	if !b.life.Enter() {
		return nil, ErrClosed
	}
	defer b.life.Leave()
	l, err := b.grabRow(actx, key, opts, true)
	if err != nil {
		if actx.Err() != nil {
			return nil, b.endedErr(ctx)
		}
		return nil, err
	}
	if !b.registerRow(l) {
		rctx, cancel := context.WithTimeout(context.Background(), b.cfg.requestTimeout)
		l.releaseRow(rctx)
		cancel()
		return nil, ErrClosed
	}
	return l, nil
}

// readersRows is Readers in lease-table mode.
func (b *Backend) readersRows(ctx context.Context, key string) ([]driver.Holder, error) {
	sql, err := b.schema.find(ctx, b.pool, "distlock_lease_reader")
	if sql == nil {
		return nil, err // nil, nil: no reader was ever granted
	}
	rows, err := b.pool.Query(ctx, sql.rowReaders, pgx.QueryExecModeExec, key)
	if err != nil {
		return nil, sortErr("readers", err)
	}
	defer rows.Close()
	var hs []driver.Holder
	for rows.Next() {
		var (
			token         int64
			since, expiry time.Time
		)
		h := driver.Holder{Key: key, Shared: true}
		if err := rows.Scan(&token, &h.Owner, &since, &expiry); err != nil {
			return nil, sortErr("readers", err)
		}
		h.Token, h.Since, h.Expires = uint64(token), since, expiry
		hs = append(hs, h)
	}
	if err := rows.Err(); err != nil {
		return nil, sortErr("readers", err)
	}
	return hs, nil
}
