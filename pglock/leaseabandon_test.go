package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/pglock"
)

// A LeaseMode Acquire or TryAcquire whose context ends while its statement
// is still running in the server leaves nothing behind when the server
// then grants it the key: before it returns, its clean-up waits for that
// statement and frees the grant, so that another Backend's try is
// granted the key at once, not when the ownerless grant's hour-long TTL
// runs out. The statement is held up by a transaction that locks the
// key's row, and the context is cancelled while it waits there; the
// driver does not stop it (its cancel requests, if it sent any, are
// lost: see newLosingBackend), so the server commits the grant (it takes
// a token) once that transaction ends, after the caller's context ended.
func TestLeaseCancelledGrantIsFreed(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			ctx, key := testCtx(t), "lease/cancelled/"+t.Name()
			admin := newPool(t, server)
			a, lose := newLosingBackend(t)
			acquire(t, a, ctx, key, distlock.AcquireOptions{}).Release(ctx) // the key's row, free
			before := fenceToken(t, admin, key)

			tx, err := admin.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(ctx, `SELECT 1 FROM distlock_lease WHERE key = $1 FOR UPDATE`, key); err != nil {
				t.Fatal(err)
			}
			blocker := int64(tx.Conn().PgConn().PID())

			lose()
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			acquired := make(chan error, 1)
			go func() {
				l, err := a.Acquire(actx, key, distlock.AcquireOptions{TTL: time.Hour, Wait: wait})
				if err == nil {
					l.Release(context.Background())
				}
				acquired <- err
			}()
			var attempt int64
			eventually(t, 10*time.Second, "the attempt's statement waits for the key's row", func() bool {
				attempt = blockedBy(t, admin, blocker, 0)
				return attempt != 0
			})
			cancel()
			// The clean-up waits for the attempt's statement, and the
			// Acquire for its clean-up.
			eventually(t, 10*time.Second, "the clean-up waits for the attempt", func() bool {
				return blockedBy(t, admin, blocker, attempt) != 0
			})
			select {
			case err := <-acquired:
				t.Fatalf("the cancelled Acquire returned (%v) while its clean-up was still waiting for its statement", err)
			default:
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-acquired:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("cancelled Acquire: %v, want context.Canceled", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the cancelled Acquire did not return")
			}
			if after := fenceToken(t, admin, key); after <= before {
				t.Fatalf("the cancelled attempt took no token (%d, then %d): the server did not grant it, and the test shows nothing", before, after)
			}

			// At once: a try of another Backend.
			b := newLeaseBackend(t, server.DSN)
			l, err := b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
			if err != nil {
				var until string
				if err := admin.QueryRow(ctx, `SELECT expires::text FROM distlock_lease WHERE key = $1`, key).Scan(&until); err != nil {
					t.Fatal(err)
				}
				t.Fatalf("another Backend's try: %v (the key's row is held until %s)", err, until)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if n := count(t, admin, `SELECT count(*) FROM distlock_lease_waiter WHERE key = $1`, key); n != 0 {
				t.Errorf("%d waiter rows left in the key's queue", n)
			}
		})
	}
}

// fenceToken returns key's latest token.
func fenceToken(t testing.TB, pool *pgxpool.Pool, key string) int64 {
	t.Helper()
	var token int64
	if err := pool.QueryRow(context.Background(), `SELECT token FROM distlock_fence WHERE key = $1`, key).Scan(&token); err != nil {
		t.Fatal(err)
	}
	return token
}

// blockedBy returns the pid of a server process, other than except, that
// waits for a lock held by blocker or by except (0 for none), or 0 if none
// does.
func blockedBy(t testing.TB, pool *pgxpool.Pool, blocker, except int64) int64 {
	t.Helper()
	var pid int64
	err := pool.QueryRow(context.Background(), `SELECT coalesce(min(pid), 0)::int8 FROM pg_stat_activity
WHERE pid <> $2::int4 AND pg_blocking_pids(pid) && ARRAY[$1::int4, $2::int4]`, blocker, except).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// newLosingBackend returns a LeaseMode Backend whose pool dials the server
// directly, and lose, after which the pool's next connection goes through
// a proxy, and the cancel requests the driver sends for it (to the
// address it is connected to, the proxy's) are lost.
func newLosingBackend(t testing.TB) (b *pglock.Backend, lose func()) {
	t.Helper()
	proxy := faultproxy.Start(t, addrOf(server))
	cfg, err := pgxpool.ParseConfig(server.DSN + "&pool_max_conns=2")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	armed, used := false, false
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		switch {
		case addr == proxy.Addr():
			mu.Unlock()
			return nil, errors.New("cancel request lost")
		case armed && !used:
			used = true
			addr = proxy.Addr()
		}
		mu.Unlock()
		return dial(ctx, network, addr)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b, err = pglock.New(pool, pglock.WithMode(pglock.LeaseMode))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, func() {
		mu.Lock()
		armed = true
		mu.Unlock()
		pool.Reset() // the next statement dials
	}
}

// The clean-up of a try touches only the try's own grant and waiter row:
// run for another grant id it leaves a live grant and the queue as they
// are, whatever the key holds (quotes and semicolons included); run for
// a key never granted it leaves the key free.
func TestLeaseAbandonTouchesOnlyItsOwn(t *testing.T) {
	ctx, key := testCtx(t), "lease/abandon/'; SELECT 1; --\\ "+t.Name()
	admin := newPool(t, server)
	b := newLeaseBackend(t, server.DSN)
	l := acquire(t, b, ctx, key, distlock.AcquireOptions{TTL: time.Hour})
	grant, expires := leaseRow(t, admin, key)
	if _, err := admin.Exec(ctx, `INSERT INTO distlock_lease_waiter (key, waiter, expires) VALUES ($1, 'other', now() + interval '1 hour')`, key); err != nil {
		t.Fatal(err)
	}
	for _, queued := range []bool{false, true} {
		if err := b.Abandon(ctx, key, "not-"+*grant, queued); err != nil {
			t.Fatalf("Abandon(queued=%v): %v", queued, err)
		}
	}
	if g, e := leaseRow(t, admin, key); *g != *grant || !e.Equal(expires) {
		t.Fatalf("another try's clean-up changed the grant's row: grant %v, expires %v; was %v, %v", *g, e, *grant, expires)
	}
	var waiters int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM distlock_lease_waiter WHERE key = $1 AND waiter = 'other' AND expires > now()`, key).Scan(&waiters); err != nil {
		t.Fatal(err)
	}
	if waiters != 1 {
		t.Errorf("another try's clean-up took the key's waiter out of the queue")
	}
	if _, err := admin.Exec(ctx, `DELETE FROM distlock_lease_waiter WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	fresh := key + "/fresh"
	if err := b.Abandon(ctx, fresh, "never-sent", true); err != nil {
		t.Fatalf("Abandon of a key never granted: %v", err)
	}
	if err := acquire(t, b, ctx, fresh, distlock.AcquireOptions{}).Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A grant that a try's clean-up frees wakes the key's next waiter as a
// release does: a waiter that polls once an hour, queued behind it, is
// granted the key at once. The clean-up goes through PgBouncer in
// transaction mode, as the holder's statements do.
func TestLeaseAbandonWakesNextWaiter(t *testing.T) {
	ctx, key := testCtx(t), "lease/abandon-wakes/"+t.Name()
	admin := newPool(t, server)
	bouncer := testserver.StartPgBouncer(t, server)
	holder := newLeaseBackend(t, bouncer.DSN)
	waiter := newLeaseBackend(t, bouncer.DSN, pglock.WithListen(server.DSN), pglock.WithPollInterval(time.Hour))

	l := acquire(t, holder, ctx, key, distlock.AcquireOptions{TTL: time.Hour})
	grant, _ := leaseRow(t, admin, key)
	got := make(chan error, 1)
	go func() {
		w, err := waiter.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "the waiter is queued and waits for a notification", func() bool {
		return queued(t, admin, key) == 1 && waiter.LivePauses() > 0
	})
	// The clean-up of a try that was granted the key as l (had its reply
	// been lost, nobody would hold l).
	if err := holder.Abandon(ctx, key, *grant, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken when the clean-up freed the grant")
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release of the freed grant: %v, want ErrLockLost", err)
	}
}
