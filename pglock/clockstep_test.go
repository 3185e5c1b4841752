package pglock_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// TestBackwardStepDuringLockWait steps the server's wall clock back while
// a try waits for a lock that its transaction needs, and renews the
// holder's grant after the step. The try must not take that grant for
// expired: its transaction began before the step, so its now() is a minute
// ahead of the clock the renewal wrote the expiry by, and only the clock
// read once the wait is over compares with what it then sees. The torture
// nemesis found this: a permit granted twice in lease mode when a try of
// the semaphore straddled a step back of PostgreSQL's clock (seed
// 1796501929713515433, 30 minutes, postgres-lease).
func TestBackwardStepDuringLockWait(t *testing.T) {
	srv := testserver.StartPostgres(t, testserver.WithPostgresMovableClock())
	pool := newPool(t, srv)
	ctx := testCtx(t)
	if err := pglock.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		// hold grants the key $1 to "h" and renew renews that grant (or,
		// after a release, grants it to "b"); each returns whether it did.
		hold, renew string
		// block takes, in the blocker's transaction, the lock on the key
		// $1 that the try waits for; with renewInBlocker, the renewal
		// runs in that transaction too, after the step.
		block          string
		renewInBlocker bool
		// try asks for the key $1 for "w" without queueing; it returns
		// the token granted, or NULL, and the milliseconds until it is
		// worth trying again.
		try string
	}{{
		name:  "lease",
		hold:  `SELECT granted IS NOT NULL FROM distlock_lease_wait($1, 'h', '', 20000, 0)`,
		renew: `SELECT distlock_lease_refresh($1, 'h', 20000)`,
		// The lock a try shares with the clean-up of its grant id.
		block: `SELECT pg_advisory_xact_lock(1685086061, hashtext('w')), $1::text`,
		try:   `SELECT granted, retry_ms FROM distlock_lease_wait($1, 'w', '', 20000, 0)`,
	}, {
		// The key's row, released, which the try's UPDATE finds free and
		// waits for, while the transaction that holds it grants the key
		// to another after the step: the try must read the clock after
		// its wait, not before.
		name:           "lease row",
		hold:           `SELECT distlock_lease_release($1, 'h') FROM distlock_lease_acquire($1, 'h', '', 20000)`,
		renew:          `SELECT granted IS NOT NULL FROM distlock_lease_acquire($1, 'b', '', 20000)`,
		block:          `SELECT 1 FROM distlock_lease WHERE key = $1 FOR UPDATE`,
		renewInBlocker: true,
		try:            `SELECT granted, retry_ms FROM distlock_lease_acquire($1, 'w', '', 20000)`,
	}, {
		name:  "permit",
		hold:  `SELECT granted IS NOT NULL FROM distlock_permit_acquire($1, 'h', '', 20000, 1, true, 0)`,
		renew: `SELECT distlock_permit_refresh($1, 'h', 20000)`,
		// The semaphore's lock.
		block: `SELECT 1 FROM distlock_semaphore WHERE key = $1 FOR UPDATE`,
		try:   `SELECT granted, retry_ms FROM distlock_permit_acquire($1, 'w', '', 20000, 1, true, 0)`,
	}} {
		t.Run(c.name, func(t *testing.T) {
			key := "clock/" + c.name
			var ok bool
			if err := pool.QueryRow(ctx, c.hold, key).Scan(&ok); err != nil || !ok {
				t.Fatalf("hold: %v (granted %v)", err, ok)
			}
			blocker, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Rollback(ctx)
			var blockerPid int64
			if err := blocker.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&blockerPid); err != nil {
				t.Fatal(err)
			}
			if _, err := blocker.Exec(ctx, c.block, key); err != nil {
				t.Fatal(err)
			}
			type result struct {
				token, retry *int64
				err          error
			}
			done := make(chan result, 1)
			w := rawConn(t, srv)
			go func() {
				var r result
				r.err = w.QueryRow(ctx, c.try, key).Scan(&r.token, &r.retry)
				done <- r
			}()
			eventually(t, time.Minute, "the try waits for the blocker's lock", func() bool {
				return blockedBy(t, pool, blockerPid, 0) != 0
			})
			srv.Clock.Jump(-time.Minute)
			renewer := pgx.Tx(nil)
			if c.renewInBlocker {
				renewer = blocker
			}
			var err2 error
			if renewer != nil {
				err2 = renewer.QueryRow(ctx, c.renew, key).Scan(&ok)
			} else {
				err2 = pool.QueryRow(ctx, c.renew, key).Scan(&ok)
			}
			if err2 != nil || !ok {
				t.Fatalf("renew after the step: %v (renewed %v)", err2, ok)
			}
			if err := blocker.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			var r result
			select {
			case r = <-done:
			case <-ctx.Done():
				t.Fatal("the try did not return")
			}
			switch {
			case r.err != nil:
				t.Fatalf("try: %v", r.err)
			case r.token != nil:
				t.Fatalf("the try was granted token %d while a grant made or renewed for 20s by the stepped clock is live: it compared the expiry with the clock before the step", *r.token)
			case r.retry == nil || *r.retry < 10000:
				// Refused for that grant, which has most of its 20s left.
				t.Fatalf("the try was refused with retry_ms %v, want the live grant's 20s or so", r.retry)
			}
		})
	}
}
