package pglock_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
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
			acquire(t, a, ctx, key, driver.AcquireOptions{}).Release(ctx) // the key's row, free
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
				l, err := a.Acquire(actx, key, driver.AcquireOptions{TTL: time.Hour, Wait: wait})
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
			l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
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
	r := newRoutedBackend(t)
	return r.Backend, r.route
}

// routedBackend is a LeaseMode Backend whose pool dials the server
// directly until route is called; its next connection then goes through
// proxy, and the cancel requests the driver sends for it (to the address
// it is connected to, the proxy's) are lost.
type routedBackend struct {
	*pglock.Backend
	pool  *pgxpool.Pool
	proxy *faultproxy.Proxy
	tries atomic.Int64  // lease tries written to the routed connection
	pid   atomic.Uint32 // the routed connection's server process

	mu             sync.Mutex
	routed, dialed bool
}

func newRoutedBackend(t testing.TB, opts ...pglock.Option) *routedBackend {
	t.Helper()
	r := &routedBackend{proxy: faultproxy.Start(t, addrOf(server))}
	cfg, err := pgxpool.ParseConfig(server.DSN + "&pool_max_conns=2")
	if err != nil {
		t.Fatal(err)
	}
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		switch {
		case addr == r.proxy.Addr():
			return nil, errors.New("cancel request lost")
		case r.routed && !r.dialed:
			r.dialed = true
			c, err := dial(ctx, network, r.proxy.Addr())
			if err != nil {
				return nil, err
			}
			return &tryCounter{Conn: c, tries: &r.tries}, nil
		}
		return dial(ctx, network, addr)
	}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		if _, ok := c.PgConn().Conn().(*tryCounter); ok {
			r.pid.Store(c.PgConn().PID())
		}
		return nil
	}
	r.pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.pool.Close)
	r.Backend, err = pglock.New(r.pool, append([]pglock.Option{pglock.WithMode(pglock.LeaseMode)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// route has the pool's next connection go through the proxy.
func (r *routedBackend) route() {
	r.mu.Lock()
	r.routed = true
	r.mu.Unlock()
	r.pool.Reset() // the next statement dials
}

// tryCounter counts the lease tries written to a connection.
type tryCounter struct {
	net.Conn
	tries *atomic.Int64
}

func (c *tryCounter) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil && bytes.Contains(p, []byte("distlock_lease_wait")) {
		c.tries.Add(1)
	}
	return n, err
}

// A lease try whose statement reaches the server only after its Acquire
// gave up, and cleaned up, does nothing there: it neither takes the key,
// free, for nobody until its hour-long TTL runs out, nor queues a waiter
// that would stand in the queue for hours (its Backend polls once an
// hour) and keep other clients' tries out. The statement is held in a
// proxy until the cancelled Acquire has returned; the proxy then delivers
// it, and the session it came on ends after it.
func TestLeaseLateTryDoesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait bool // a waiting Acquire, the key held; otherwise a try, the key free
	}{
		{"Try", false},
		{"Waiting", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, key := testCtx(t), "lease/late/"+t.Name()
			admin := newPool(t, server)
			other := newLeaseBackend(t, server.DSN)
			var holder driver.Lease
			if tc.wait {
				holder = acquire(t, other, ctx, key, driver.AcquireOptions{TTL: time.Hour})
			}
			r := newRoutedBackend(t, pglock.WithPollInterval(time.Hour))
			r.route()
			// The routed connection is made for a grant of another key,
			// and is then the pool's only one.
			if err := acquire(t, r, ctx, key+"/other", driver.AcquireOptions{}).Release(ctx); err != nil {
				t.Fatal(err)
			}
			r.proxy.Blackhole()
			tries := r.tries.Load()
			actx, cancel := context.WithCancel(ctx)
			defer cancel()
			acquired := make(chan error, 1)
			go func() {
				l, err := r.Acquire(actx, key, driver.AcquireOptions{TTL: time.Hour, Wait: tc.wait})
				if err == nil {
					l.Release(context.Background())
				}
				acquired <- err
			}()
			eventually(t, 10*time.Second, "the try is sent, into the proxy", func() bool { return r.tries.Load() > tries })
			cancel()
			select {
			case err := <-acquired:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("cancelled Acquire: %v, want context.Canceled", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the cancelled Acquire did not return")
			}
			r.proxy.Heal()
			eventually(t, 10*time.Second, "the late try has reached the server, and its session ended", func() bool {
				return count(t, admin, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, r.pid.Load()) == 0
			})
			if holder != nil {
				if err := holder.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			l, err := other.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
			if err != nil {
				var row string
				if err := admin.QueryRow(ctx, `SELECT format('granted %s, until %s', grant_id IS NOT NULL, expires) FROM distlock_lease WHERE key = $1`, key).Scan(&row); err != nil {
					t.Fatal(err)
				}
				t.Fatalf("another Backend's try after the late one: %v (the key's row: %s; %d waiters queued)", err, row, queued(t, admin, key))
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

// The clean-up of a try touches only the try's own grant and waiter row:
// run for another grant id it leaves a live grant and the queue as they
// are, whatever the key holds (quotes and semicolons included); run for
// a key never granted it leaves the key free.
func TestLeaseAbandonTouchesOnlyItsOwn(t *testing.T) {
	ctx, key := testCtx(t), "lease/abandon/'; SELECT 1; --\\ "+t.Name()
	admin := newPool(t, server)
	b := newLeaseBackend(t, server.DSN)
	l := acquire(t, b, ctx, key, driver.AcquireOptions{TTL: time.Hour})
	grant, expires := leaseRow(t, admin, key)
	if _, err := admin.Exec(ctx, `INSERT INTO distlock_lease_waiter (key, waiter, expires) VALUES ($1, 'other', now() + interval '1 hour')`, key); err != nil {
		t.Fatal(err)
	}
	if err := b.Abandon(ctx, key, "not-"+*grant, time.Minute); err != nil {
		t.Fatalf("Abandon: %v", err)
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
	if err := b.Abandon(ctx, fresh, "never-sent", time.Minute); err != nil {
		t.Fatalf("Abandon of a key never granted: %v", err)
	}
	if err := acquire(t, b, ctx, fresh, driver.AcquireOptions{}).Release(ctx); err != nil {
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

	l := acquire(t, holder, ctx, key, driver.AcquireOptions{TTL: time.Hour})
	grant, _ := leaseRow(t, admin, key)
	got := make(chan error, 1)
	go func() {
		w, err := waiter.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
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
	if err := holder.Abandon(ctx, key, *grant, time.Minute); err != nil {
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

// A database made by the previous version of the schema (version 3, in
// testdata), whose clean-up was a batch of plain statements, is migrated by
// a Backend's first use, and its clean-ups then work there: one frees the
// grant of its try and leaves the try's tombstone, which a late try of it
// then finds.
func TestLeaseAbandonAfterMigrateFromV3(t *testing.T) {
	ctx, key := testCtx(t), "lease/abandon-v3/"+t.Name()
	old, err := os.ReadFile("testdata/schema-v3.sql")
	if err != nil {
		t.Fatal(err)
	}
	admin := newPool(t, server)
	db := "mig_" + strings.ToLower(rand.Text()[:10])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	dsn := strings.Replace(server.DSN, "/postgres?", "/"+db+"?", 1)
	pool := newPoolDSN(t, dsn)
	if _, err := pool.Exec(ctx, string(old)); err != nil {
		t.Fatalf("schema version 3: %v", err)
	}
	b := newLeaseBackend(t, dsn)
	acquire(t, b, ctx, key, driver.AcquireOptions{TTL: time.Hour})
	grant, _ := leaseRow(t, pool, key)
	if err := b.Abandon(ctx, key, *grant, time.Minute); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	var late *int64
	if err := pool.QueryRow(ctx, `SELECT granted FROM distlock_lease_wait($1, $2, '', 60000, 0)`, key, *grant).Scan(&late); err != nil {
		t.Fatal(err)
	}
	if late != nil {
		t.Fatalf("a late try of the abandoned grant id was granted the key (token %d)", *late)
	}
	if n := count(t, pool, `SELECT count(*) FROM distlock_lease WHERE key = $1 AND expires > now()`, key); n != 0 {
		t.Errorf("the abandoned grant still holds the key")
	}
}

// A try that never reached the server (no connection could be made) has
// nothing to clean up, and its Acquire sends nothing more: with the
// server unreachable, a clean-up would only wait for a connection in
// vain before the Acquire could return.
func TestLeaseUnsentTrySendsNoCleanUp(t *testing.T) {
	ctx, key := testCtx(t), "lease/unsent/"+t.Name()
	cfg, err := pgxpool.ParseConfig(server.DSN)
	if err != nil {
		t.Fatal(err)
	}
	var (
		dials atomic.Int64
		down  atomic.Bool
	)
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		if down.Load() {
			return nil, errors.New("connection refused")
		}
		return dial(ctx, network, addr)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b, err := pglock.New(pool, pglock.WithMode(pglock.LeaseMode))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	// The schema is checked by the first Acquire, before its try.
	if err := acquire(t, b, ctx, key, driver.AcquireOptions{}).Release(ctx); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	pool.Reset()
	before := dials.Load()
	if _, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Acquire with the server unreachable: %v, want ErrUnavailable", err)
	}
	if n := dials.Load() - before; n != 1 {
		t.Errorf("%d connections tried, want 1 (the try's): a clean-up followed a try that never reached the server", n)
	}
}
