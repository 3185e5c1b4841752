package pglock_test

import (
	"testing"
	"time"

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
		// hold grants the key $1 to "h" and renew renews that grant; each
		// returns whether it did.
		hold, renew string
		// block takes, in the blocker's transaction, the lock that the
		// try waits for.
		block string
		// try asks for the key $1 for "w" without queueing; it returns
		// the token granted, or NULL.
		try string
	}{{
		name:  "lease",
		hold:  `SELECT granted IS NOT NULL FROM distlock_lease_wait($1, 'h', '', 20000, 0)`,
		renew: `SELECT distlock_lease_refresh($1, 'h', 20000)`,
		// The lock a try shares with the clean-up of its grant id.
		block: `SELECT pg_advisory_xact_lock(1685086061, hashtext('w'))`,
		try:   `SELECT granted FROM distlock_lease_wait($1, 'w', '', 20000, 0)`,
	}, {
		name:  "permit",
		hold:  `SELECT granted IS NOT NULL FROM distlock_permit_acquire($1, 'h', '', 20000, 1, true, 0)`,
		renew: `SELECT distlock_permit_refresh($1, 'h', 20000)`,
		// The semaphore's lock (the test's only semaphore).
		block: `SELECT 1 FROM distlock_semaphore FOR UPDATE`,
		try:   `SELECT granted FROM distlock_permit_acquire($1, 'w', '', 20000, 1, true, 0)`,
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
			if _, err := blocker.Exec(ctx, c.block); err != nil {
				t.Fatal(err)
			}
			type result struct {
				token *int64
				err   error
			}
			done := make(chan result, 1)
			w := rawConn(t, srv)
			go func() {
				var r result
				r.err = w.QueryRow(ctx, c.try, key).Scan(&r.token)
				done <- r
			}()
			eventually(t, time.Minute, "the try waits for the blocker's lock", func() bool {
				return blockedBy(t, pool, blockerPid, 0) != 0
			})
			srv.Clock.Jump(-time.Minute)
			if err := pool.QueryRow(ctx, c.renew, key).Scan(&ok); err != nil || !ok {
				t.Fatalf("renew after the step: %v (renewed %v)", err, ok)
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
				t.Fatalf("the try was granted token %d while h's grant, renewed 20s after the stepped clock, is live: it compared the expiry with the clock before the step", *r.token)
			}
		})
	}
}
