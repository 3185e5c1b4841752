package pglock

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

// abandonStatement is one statement of a clean-up, with the number of its
// parameters: the key ($1) alone, or the key and the grant id ($2).
type abandonStatement struct {
	sql    string
	params int
}

// The clean-ups of abandonRow: plain statements over the schema's tables
// and its release and leave functions, so that they need no function of
// their own (and no new schema version). Each is sent as one batch of the
// extended protocol, its parameters bound rather than quoted into the
// text (so that it works whatever standard_conforming_strings is) and one
// Sync at its end: one round trip that the server runs as one
// transaction, statement after statement, each with a snapshot of its own:
//
//   - the INSERT into distlock_lease waits for a statement that is
//     inserting the key's first row (an insert of the same key waits for
//     it to commit or abort); otherwise it leaves the key's row as it is,
//     or adds it free, as a release leaves it, when the key has none;
//   - the SELECT ... FOR UPDATE waits for a statement that has changed the
//     key's row (a grant) to commit or abort, and keeps the row locked
//     until the clean-up commits;
//   - in abandonWaiter, the INSERT into distlock_lease_waiter waits for a
//     statement that is queueing the waiter, or renewing its row, and then
//     marks the row expired (adding it if there is none) for the leave to
//     delete;
//   - the release frees a grant named $2 that has not expired, notifying
//     the key's head waiter as any release does; the leave takes $2 out of
//     the queue, and wakes the next waiter if the key is free.
var (
	abandonKeyRow = []abandonStatement{
		{`INSERT INTO @schema@.distlock_lease (key, grant_id, expires) VALUES ($1::pg_catalog.text, NULL, '-infinity') ON CONFLICT (key) DO NOTHING`, 1},
		{`SELECT 1 FROM @schema@.distlock_lease WHERE key OPERATOR(pg_catalog.=) $1::pg_catalog.text FOR UPDATE`, 1},
	}
	abandonTry = append(abandonKeyRow[:len(abandonKeyRow):len(abandonKeyRow)],
		abandonStatement{`SELECT @schema@.distlock_lease_release($1::pg_catalog.text, $2::pg_catalog.text)`, 2})
	abandonWaiter = append(abandonKeyRow[:len(abandonKeyRow):len(abandonKeyRow)],
		abandonStatement{`INSERT INTO @schema@.distlock_lease_waiter AS w (key, waiter, expires)
VALUES ($1::pg_catalog.text, $2::pg_catalog.text, '-infinity')
ON CONFLICT (key, waiter) DO UPDATE SET expires = '-infinity'`, 2},
		abandonStatement{`SELECT @schema@.distlock_lease_release($1::pg_catalog.text, $2::pg_catalog.text)`, 2},
		abandonStatement{`SELECT @schema@.distlock_lease_leave($1::pg_catalog.text, $2::pg_catalog.text)`, 2})
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
	stmts := abandonTry
	if queued {
		stmts = abandonWaiter
	}
	sql, err := b.schema.ensure(ctx, b.pool)
	if err != nil {
		return err
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	params := [][]byte{[]byte(key), []byte(grant)}
	batch := &pgconn.Batch{}
	for _, s := range stmts {
		batch.ExecParams(sql.qualified(s.sql), params[:s.params], nil, nil, nil)
	}
	_, err = conn.Conn().PgConn().ExecBatch(ctx, batch).ReadAll()
	return err
}
