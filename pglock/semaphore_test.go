package pglock_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// revokePermits ends the live permits of the semaphore at key, as an
// operator's UPDATE does; their holders learn it at their next renewal.
func revokePermits(t testing.TB, admin *pgxpool.Pool, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tag, err := admin.Exec(ctx, `UPDATE distlock_permit SET expires = '-infinity' WHERE key = $1 AND expires > now()`, key)
	if err != nil || tag.RowsAffected() == 0 {
		t.Fatalf("revoke the permits of %q: %v, %v", key, tag, err)
	}
}

// The conformance suite of semaphores, in session mode and in lease-table
// mode: directly, with LISTEN on a session of its own; through PgBouncer
// in transaction mode, with LISTEN on a direct session; and through
// PgBouncer with no LISTEN (polling).
func TestSemaphoreConformance(t *testing.T) {
	admin := newPool(t, server)
	revoke := distlocktest.WithRevoke(func(t *testing.T, key string) { revokePermits(t, admin, key) })
	t.Run("Session", func(t *testing.T) {
		distlocktest.RunSemaphore(t, func(t *testing.T) driver.Backend { return newBackend(t, server) }, revoke)
	})
	bouncer := testserver.StartPgBouncer(t, server)
	for _, tc := range []struct {
		name string
		dsn  string
		opts []pglock.Option
	}{
		{"Lease/Direct", server.DSN, []pglock.Option{pglock.WithListen(server.DSN)}},
		{"Lease/PgBouncer", bouncer.DSN, []pglock.Option{pglock.WithListen(server.DSN)}},
		{"Lease/PgBouncerPolling", bouncer.DSN, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			distlocktest.RunSemaphore(t, func(t *testing.T) driver.Backend { return newLeaseBackend(t, tc.dsn, tc.opts...) }, revoke)
		})
	}
}

// Tokens of locks and permits of one key increase together, in both
// modes: a permit's token is drawn from the key's counter when it is
// granted.
func TestPermitTokensFollowLocks(t *testing.T) {
	for _, mode := range []pglock.Mode{pglock.SessionMode, pglock.LeaseMode} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx, key := testCtx(t), "semaphore/tokens/"+t.Name()
			b := newBackend(t, server, pglock.WithMode(mode))
			var last uint64
			for i := range 6 {
				var l driver.Lease
				var err error
				if i%2 == 0 {
					l, err = b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
				} else {
					l, err = b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 2}, driver.AcquireOptions{TTL: time.Minute})
				}
				if err != nil {
					t.Fatalf("grant %d: %v", i, err)
				}
				if l.Token() <= last {
					t.Fatalf("grant %d: token %d after %d", i, l.Token(), last)
				}
				last = l.Token()
				if err := l.Release(ctx); err != nil {
					t.Fatalf("release %d: %v", i, err)
				}
			}
		})
	}
}

// A permit whose holder went away without a word is given back within
// its TTL in session mode too (the conformance suite's test of it runs
// only where locks have a TTL), to a holder waiting for it.
func TestPermitAbandonedComesBackInSessionMode(t *testing.T) {
	ctx, key := testCtx(t), "semaphore/abandoned/"+t.Name()
	gone, waiter := newBackend(t, server), newBackend(t, server)
	p, err := gone.AcquirePermit(ctx, key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	q, err := waiter.AcquirePermit(wctx, key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("AcquirePermit while the only permit is abandoned: %v", err)
	}
	if q.Token() <= p.Token() {
		t.Errorf("token %d after the abandoned permit's %d", q.Token(), p.Token())
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); !errors.Is(err, driver.ErrLockLost) {
		t.Errorf("Release of the abandoned permit: %v; want ErrLockLost", err)
	}
}

// waitPermits polls the state of the semaphore at key until cond holds,
// for 30s at most.
func waitPermits(t *testing.T, b *pglock.Backend, key, what string, cond func(driver.PermitState) bool) {
	t.Helper()
	eventually(t, 30*time.Second, what, func() bool {
		st, err := b.Permits(testCtx(t), key)
		if err != nil {
			t.Fatalf("Permits: %v", err)
		}
		return cond(st)
	})
}

// A permit given back wakes the first waiter alone, by LISTEN/NOTIFY
// (the waiters poll once an hour): the second waiter makes no try until
// the first gives its permit back in turn. Without the waiter named in
// the notification, the first release would wake both, and the second
// would try, find the permit taken, and pause again.
func TestPermitReleaseWakesFirstWaiterOnly(t *testing.T) {
	ctx, key := testCtx(t), "semaphore/wake/"+t.Name()
	opts := []pglock.Option{pglock.WithListen(server.DSN), pglock.WithPollInterval(time.Hour)}
	holder := newLeaseBackend(t, server.DSN, opts...)
	first, second := newLeaseBackend(t, server.DSN, opts...), newLeaseBackend(t, server.DSN, opts...)
	sem := driver.Semaphore{Limit: 1}
	p, err := holder.AcquirePermit(ctx, key, sem, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   driver.Lease
		err error
	}
	wait := func(b *pglock.Backend) chan result {
		c := make(chan result, 1)
		go func() {
			l, err := b.AcquirePermit(ctx, key, sem, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			c <- result{l, err}
		}()
		return c
	}
	got1 := wait(first)
	waitPermits(t, holder, key, "the first waiter in line", func(st driver.PermitState) bool { return st.Waiting == 1 })
	eventually(t, 30*time.Second, "the first waiter pausing, told of releases", func() bool { return first.LivePauses() > 0 })
	got2 := wait(second)
	waitPermits(t, holder, key, "the second waiter in line", func(st driver.PermitState) bool { return st.Waiting == 2 })
	eventually(t, 30*time.Second, "the second waiter pausing, told of releases", func() bool { return second.LivePauses() > 0 })
	pauses := second.LivePauses()
	granted := func(c chan result, what string) driver.Lease {
		t.Helper()
		select {
		case r := <-c:
			if r.err != nil {
				t.Fatalf("%s: %v", what, r.err)
			}
			return r.l
		case <-time.After(pushWait):
			t.Fatalf("%s: not granted within %v of a release", what, pushWait)
		}
		return nil
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l1 := granted(got1, "the first waiter")
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := granted(got2, "the second waiter")
	defer l2.Release(ctx)
	if n := second.LivePauses(); n != pauses {
		t.Errorf("the second waiter paused %d more times: the first release woke it", n-pauses)
	}
	if l2.Token() <= l1.Token() || l1.Token() <= p.Token() {
		t.Errorf("tokens %d, %d, %d; want them increasing", p.Token(), l1.Token(), l2.Token())
	}
}

// An earlier version's Migrate, run again over this version's schema in a
// rolling upgrade, leaves the permits' objects as they are: a Backend
// running since before, and one started after, grant and list permits,
// and locks work as before.
func TestPermitsAfterEarlierMigrate(t *testing.T) {
	ctx, key := testCtx(t), "semaphore/rolling"
	v5, err := os.ReadFile("testdata/schema-v5.sql")
	if err != nil {
		t.Fatal(err)
	}
	s := newSharedDB(t)
	running := s.backend(t, s.app)
	sem := driver.Semaphore{Limit: 2, Slots: true}
	p, err := running.AcquirePermit(ctx, key, sem, driver.AcquireOptions{TTL: time.Minute, Owner: "before"})
	if err != nil {
		t.Fatal(err)
	}
	s.exec(t, s.app, string(v5))
	fresh := s.backend(t, s.app, pglock.WithMode(pglock.LeaseMode))
	q, err := fresh.AcquirePermit(ctx, key, sem, driver.AcquireOptions{TTL: time.Minute, Owner: "after"})
	if err != nil {
		t.Fatalf("AcquirePermit after the earlier Migrate: %v", err)
	}
	for _, b := range []*pglock.Backend{running, fresh} {
		st, err := b.Permits(ctx, key)
		if err != nil || st.Limit != 2 || len(st.Holders) != 2 || st.Holders[0].Token != p.Token() || st.Holders[1].Owner != "after" ||
			!st.Holders[0].HasSlot || st.Holders[0].Slot == st.Holders[1].Slot {
			t.Errorf("Permits: %+v, %v; want both permits, in token order, with their slots", st, err)
		}
	}
	if _, err := running.AcquirePermit(ctx, key, sem, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Errorf("a third permit of two: %v; want ErrNotAcquired", err)
	}
	for _, l := range []driver.Lease{p, q} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l, err := running.Acquire(ctx, "rolling/lock", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire after the earlier Migrate: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
