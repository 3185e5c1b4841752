package pglock

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The statements of abandonRow, run in one transaction after the release
// and leave of rowReleaseSQL and rowLeaveSQL. Plain statements over the
// schema's tables, so that the clean-up needs no function of its own.
const (
	// abandonKeySQL waits for a statement that is inserting the key's
	// first row (an insert of the same key waits for it to commit or
	// abort), and otherwise leaves the row as it is, or adds it free, as
	// a release leaves it, when the key has none.
	abandonKeySQL = `INSERT INTO distlock_lease (key, grant_id, expires) VALUES ($1, NULL, '-infinity') ON CONFLICT (key) DO NOTHING`

	// abandonRowSQL waits for a statement that has changed the key's row
	// (a grant) to commit or abort, and keeps the row locked until the
	// clean-up commits.
	abandonRowSQL = `SELECT 1 FROM distlock_lease WHERE key = $1 FOR UPDATE`

	// abandonWaiterSQL waits for a statement that is queueing the waiter
	// $2, or renewing its row, to commit or abort, and then marks the row
	// expired, adding it if there is none, for rowLeaveSQL to delete.
	abandonWaiterSQL = `INSERT INTO distlock_lease_waiter AS w (key, waiter, expires) VALUES ($1, $2, '-infinity')
ON CONFLICT (key, waiter) DO UPDATE SET expires = '-infinity'`
)

// abandonRow cleans up after a try for key whose outcome is unknown: its
// statement failed or its context ended after it may have reached the
// server, which may then have granted the key to grant (an ownerless
// grant, which would hold the key until it expires) or queued or renewed
// grant's waiter row (queued says whether the try was a waiting one,
// which alone queues). It waits for that statement if the server is still
// running it, on the row locks the statement takes, and then releases a
// grant named grant, waking the key's next waiter as a release does, and
// takes grant out of the queue, in one transaction bounded by ctx. grant
// is the try's own unguessable id, so a later grant of the key is never
// touched.
func (b *Backend) abandonRow(ctx context.Context, key, grant string, queued bool) error {
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, abandonKeySQL, pgx.QueryExecModeExec, key); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, abandonRowSQL, pgx.QueryExecModeExec, key); err != nil {
			return err
		}
		if queued {
			if _, err := tx.Exec(ctx, abandonWaiterSQL, pgx.QueryExecModeExec, key, grant); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, rowReleaseSQL, pgx.QueryExecModeExec, key, grant); err != nil {
			return err
		}
		if queued {
			if _, err := tx.Exec(ctx, rowLeaveSQL, pgx.QueryExecModeExec, key, grant); err != nil {
				return err
			}
		}
		return nil
	})
}
