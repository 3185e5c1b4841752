package pglock

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// rowAbandonSQL cleans up after the try $2 of key $1 and leaves its
// tombstone for $3 ms (see distlock_lease_abandon in schema.sql).
const rowAbandonSQL = `SELECT @schema@.distlock_lease_abandon($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8)`

// minTombstone is the least time the tombstone of an abandoned try is
// kept, whatever its TTL.
const minTombstone = 10 * time.Second

// abandonRow cleans up after a try for key whose outcome is unknown: its
// statement failed, or its context ended, after the statement may have
// reached the server, which may then have granted the key to grant (an
// ownerless grant, which would hold the key until it expires) or queued
// grant as a waiter. In one statement, bounded by ctx, it waits for the
// try's statement if the server is still running it, leaves the try's
// tombstone so that the statement does nothing if it reaches the server
// later, and then releases a grant named grant and takes grant out of the
// queue. grant is the try's own unguessable id, so a later grant of the
// key, and any other waiter, is never touched. The tombstone outlives
// what the try would leave: a grant (ttl), a place in the queue (the
// waiter's row, which lives waiterLife).
func (b *Backend) abandonRow(ctx context.Context, key, grant string, ttl, waiterLife time.Duration) error {
	sql, err := b.schema.ensure(ctx, b.pool)
	if err != nil {
		return err
	}
	keep := max(ttl, waiterLife, minTombstone)
	_, err = b.pool.Exec(ctx, sql.rowAbandon, pgx.QueryExecModeExec, key, grant, keep.Milliseconds())
	return err
}
