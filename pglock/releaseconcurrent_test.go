package pglock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
)

// A session-mode release that meets the key's row being changed by another
// transaction (a lease-mode grant taking the key's next token) waits for
// it, and then judges the row as it is: if that transaction took a token
// (commit), the release unlocks without the mark; if not (rollback), it
// marks the grant released. Either way the lock is given up exactly once,
// on a connection that goes back to the pool.
func TestReleaseMeetsConcurrentTokenChange(t *testing.T) {
	for _, commit := range []bool{true, false} {
		name := map[bool]string{true: "commit", false: "rollback"}[commit]
		t.Run(name, func(t *testing.T) {
			ctx, key := testCtx(t), "concurrent/"+t.Name()
			admin := newPool(t, server)
			b, err := pglock.New(newPool(t, server, "pool_max_conns=1"))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			l := acquire(t, b, ctx, key, driver.AcquireOptions{})
			holder := int64(count(t, admin, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
	AND ((classid::int8 << 32) | objid::int8) = hashtextextended($1, 0)`, key))

			tx, err := admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `UPDATE distlock_fence SET token = token + 1 WHERE key = $1`, key); err != nil {
				t.Fatal(err)
			}
			blocker := int64(tx.Conn().PgConn().PID())
			released := make(chan error, 1)
			go func() { released <- l.Release(ctx) }()
			eventually(t, 10*time.Second, "the release waits for the key's row", func() bool {
				return blockedBy(t, admin, blocker, 0) == holder
			})
			if commit {
				err = tx.Commit(ctx)
			} else {
				err = tx.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := <-released; err != nil {
				t.Fatalf("release: %v", err)
			}
			if n := count(t, admin, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
	AND ((classid::int8 << 32) | objid::int8) = hashtextextended($1, 0)`, key); n != 0 {
				t.Errorf("%d advisory locks of the key left after the release", n)
			}
			var held bool
			if err := admin.QueryRow(ctx, `SELECT held FROM distlock_fence WHERE key = $1`, key).Scan(&held); err != nil {
				t.Fatal(err)
			}
			if held != commit {
				t.Errorf("held = %v after the release, want %v (marked only if the row still names the grant)", held, commit)
			}
			l = acquire(t, b, ctx, key, driver.AcquireOptions{})
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if n := b.Pool().Stat().NewConnsCount(); n != 1 {
				t.Errorf("%d connections made, want the one, given back by the release", n)
			}
		})
	}
}
