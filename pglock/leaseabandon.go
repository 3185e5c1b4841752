package pglock

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The clean-ups of abandonRow: plain statements over the schema's tables
// and its release and leave functions, so that they need no function of
// their own (and no new schema version). Each is sent as one query of the
// simple protocol, one round trip that the server runs as one transaction,
// statement after statement, each with a snapshot of its own:
//
//   - the INSERT into distlock_lease waits for a statement that is
//     inserting the key's first row (an insert of the same key waits for
//     it to commit or abort); otherwise it leaves the key's row as it is,
//     or adds it free, as a release leaves it, when the key has none;
//   - the SELECT ... FOR UPDATE waits for a statement that has changed the
//     key's row (a grant) to commit or abort, and keeps the row locked
//     until the clean-up commits;
//   - in abandonWaiterSQL, the INSERT into distlock_lease_waiter waits
//     for a statement that is queueing the waiter, or renewing its row,
//     and then marks the row expired (adding it if there is none) for the
//     leave to delete;
//   - the release frees a grant named $2 that has not expired, notifying
//     the key's head waiter as any release does; the leave takes $2 out of
//     the queue, and wakes the next waiter if the key is free.
const (
	abandonTrySQL = `INSERT INTO distlock_lease (key, grant_id, expires) VALUES ($1, NULL, '-infinity') ON CONFLICT (key) DO NOTHING;
SELECT 1 FROM distlock_lease WHERE key = $1 FOR UPDATE;
SELECT distlock_lease_release($1, $2)`

	abandonWaiterSQL = `INSERT INTO distlock_lease (key, grant_id, expires) VALUES ($1, NULL, '-infinity') ON CONFLICT (key) DO NOTHING;
SELECT 1 FROM distlock_lease WHERE key = $1 FOR UPDATE;
INSERT INTO distlock_lease_waiter AS w (key, waiter, expires) VALUES ($1, $2, '-infinity')
ON CONFLICT (key, waiter) DO UPDATE SET expires = '-infinity';
SELECT distlock_lease_release($1, $2);
SELECT distlock_lease_leave($1, $2)`
)

// abandonRow cleans up after a try for key whose outcome is unknown: its
// statement failed, or its context ended, after the statement may have
// reached the server, which may then have granted the key to grant (an
// ownerless grant, which would hold the key until it expires) or, for a
// waiting try (queued), queued or renewed grant's waiter row. It waits
// for that statement, if the server is still running it, on the row locks
// the statement takes, and then releases a grant named grant and takes
// grant out of the queue, in one transaction bounded by ctx. grant is the
// try's own unguessable id, so a later grant of the key, and any other
// waiter, is never touched.
func (b *Backend) abandonRow(ctx context.Context, key, grant string, queued bool) error {
	sql := abandonTrySQL
	if queued {
		sql = abandonWaiterSQL
	}
	_, err := b.pool.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol, key, grant)
	return err
}
