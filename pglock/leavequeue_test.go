package pglock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
)

// A waiter that leaves the queue while the holder releases the key: the
// release names the leaver as the head, and the leave, which sees the key
// still held, names no one. The next waiter must be named all the same by
// one of the two, or it is woken only by its next poll.
func TestLeaseQueueLeaveRacingRelease(t *testing.T) {
	ctx, key := testCtx(t), "lease/queue-leave-race/"+t.Name()
	admin := newPool(t, server)
	if err := pglock.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	var granted *int64
	if err := admin.QueryRow(ctx, `SELECT granted FROM distlock_lease_acquire($1, 'A', '', 60000)`, key).Scan(&granted); err != nil || granted == nil {
		t.Fatalf("grant to A: %v (token %v)", err, granted)
	}
	for _, w := range []string{"B", "C"} {
		if _, err := admin.Exec(ctx, `SELECT distlock_lease_wait($1, $2, '', 60000, 60000)`, key, w); err != nil {
			t.Fatal(err)
		}
	}
	if n := queued(t, admin, key); n != 2 {
		t.Fatalf("%d waiters queued, want 2", n)
	}
	listen := rawConn(t, server)
	if _, err := listen.Exec(ctx, "LISTEN distlock_lease"); err != nil {
		t.Fatal(err)
	}

	// B leaves, in a transaction left open for now.
	leaver := rawConn(t, server)
	tx, err := leaver.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT distlock_lease_leave($1, 'B')`, key); err != nil {
		t.Fatal(err)
	}
	// A releases meanwhile: either at once, or waiting for the leave.
	releaser := rawConn(t, server)
	pid := releaser.PgConn().PID()
	released := make(chan error, 1)
	go func() {
		var ok bool
		err := releaser.QueryRow(ctx, `SELECT distlock_lease_release($1, 'A')`, key).Scan(&ok)
		if err == nil && !ok {
			err = distlock.ErrLockLost
		}
		released <- err
	}()
	var early error
	done := false
	eventually(t, 10*time.Second, "the release ran or waits for the leave", func() bool {
		select {
		case early = <-released:
			done = true
			return true
		default:
		}
		return count(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pid) == 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !done {
		early = <-released
	}
	if early != nil {
		t.Fatalf("release: %v", early)
	}

	waitNotified(t, ctx, listen, key+"\nC", "no notification named the next waiter C")
}

// A Backend closed while one of its Acquires waits takes that waiter out
// of the queue before Close returns, as a waiter whose context ends is:
// otherwise its row, which lives three pauses, holds up the waiters behind
// it, and a release that names it wakes no one.
func TestLeaseQueueCloseLeaves(t *testing.T) {
	ctx, key := testCtx(t), "lease/queue-close/"+t.Name()
	admin := newPool(t, server)
	holder := newLeaseBackend(t, server.DSN)
	acquire(t, holder, ctx, key, driver.AcquireOptions{TTL: 2 * time.Minute})
	waiter := newLeaseBackend(t, server.DSN, pglock.WithListen(server.DSN), pglock.WithPollInterval(time.Hour))
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		done <- err
	}()
	eventually(t, 10*time.Second, "the waiter is queued", func() bool {
		return queued(t, admin, key) == 1 && waiter.LivePauses() > 0
	})
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("the waiter of a closed Backend was granted the key")
	}
	if n := queued(t, admin, key); n != 0 {
		t.Fatalf("%d waiters still queued after their Backend closed, want 0", n)
	}
}

// Two waiters queue while the key is released: the first's row, its seq
// the lower, commits after the second's, and after the release read the
// queue, which named the second. The second's try then finds the first
// ahead of it with the key free: the first, which no release named, must
// be woken by that try, or it sleeps until its poll and the second until
// the first's row expires.
func TestLeaseQueueLateCommitIsWoken(t *testing.T) {
	ctx, key := testCtx(t), "lease/queue-late-commit/"+t.Name()
	admin := newPool(t, server)
	if err := pglock.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	var granted *int64
	if err := admin.QueryRow(ctx, `SELECT granted FROM distlock_lease_acquire($1, 'A', '', 60000)`, key).Scan(&granted); err != nil || granted == nil {
		t.Fatalf("grant to A: %v (token %v)", err, granted)
	}
	listen := rawConn(t, server)
	if _, err := listen.Exec(ctx, "LISTEN distlock_lease"); err != nil {
		t.Fatal(err)
	}
	// B's first try, its transaction not yet committed; then C's.
	first := rawConn(t, server)
	tx, err := first.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	wait := `SELECT granted FROM distlock_lease_wait($1, $2, '', 60000, 60000)`
	if err := tx.QueryRow(ctx, wait, key, "B").Scan(&granted); err != nil || granted != nil {
		t.Fatalf("B's try: %v (token %v)", err, granted)
	}
	if err := admin.QueryRow(ctx, wait, key, "C").Scan(&granted); err != nil || granted != nil {
		t.Fatalf("C's try: %v (token %v)", err, granted)
	}
	var ok bool
	if err := admin.QueryRow(ctx, `SELECT distlock_lease_release($1, 'A')`, key).Scan(&ok); err != nil || !ok {
		t.Fatalf("release: %v (%v)", err, ok)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// C, named by the release, tries and is refused: B is ahead.
	if err := admin.QueryRow(ctx, wait, key, "C").Scan(&granted); err != nil || granted != nil {
		t.Fatalf("C's second try: %v (token %v), want refused", err, granted)
	}
	waitNotified(t, ctx, listen, key+"\nB", "no notification named the head waiter B")
}

// A release by the previous version's distlock_lease_release (an instance
// of the previous version that ran its Migrate again put it back) names
// the key alone: every waiter of the key is woken, as that version's
// waiters were, instead of none.
func TestLeaseQueueOldNotificationWakes(t *testing.T) {
	ctx, key := testCtx(t), "lease/queue-old-notify/"+t.Name()
	admin := newPool(t, server)
	holder := newLeaseBackend(t, server.DSN)
	waiter := newLeaseBackend(t, server.DSN, pglock.WithListen(server.DSN), pglock.WithPollInterval(time.Hour))
	acquire(t, holder, ctx, key, driver.AcquireOptions{TTL: 2 * time.Minute})
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "the waiter is queued", func() bool {
		return queued(t, admin, key) == 1 && waiter.LivePauses() > 0
	})
	// The previous version's release: free the row, notify the key.
	if _, err := admin.Exec(ctx, `UPDATE distlock_lease SET grant_id = NULL, expires = '-infinity' WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_notify('distlock_lease', $1)`, key); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // it polls once an hour
		t.Fatal("the waiter was not woken by a release of the previous version")
	}
}

// waitNotified waits up to 10 seconds for a notification on listen with
// payload want, and fails the test with what if none comes.
func waitNotified(t *testing.T, ctx context.Context, listen *pgx.Conn, want, what string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		n, err := listen.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n.Payload == want {
			return
		}
	}
}
