package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// newLeaseBackend returns a LeaseMode Backend over a pool of its own to
// dsn, both closed when the test ends.
func newLeaseBackend(t testing.TB, dsn string, opts ...pglock.Option) *pglock.Backend {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn+"&pool_max_conns=8")
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	b, err := pglock.New(pool, append([]pglock.Option{pglock.WithMode(pglock.LeaseMode)}, opts...)...)
	if err != nil {
		t.Fatalf("pglock.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// unreachableLease returns a LeaseMode Backend whose server is not there.
func unreachableLease(t *testing.T) driver.Backend {
	return newLeaseBackend(t, fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=2", closedAddr(t)))
}

// The conformance suite in lease-table mode: directly, with LISTEN on a
// session of its own; through PgBouncer in transaction mode, with LISTEN
// on a direct session; and through PgBouncer with no LISTEN (polling).
func TestLeaseConformance(t *testing.T) {
	bouncer := testserver.StartPgBouncer(t, server)
	for _, tc := range []struct {
		name string
		dsn  string
		opts []pglock.Option
	}{
		{"Direct", server.DSN, []pglock.Option{pglock.WithListen(server.DSN)}},
		{"PgBouncer", bouncer.DSN, []pglock.Option{pglock.WithListen(server.DSN)}},
		{"PgBouncerPolling", bouncer.DSN, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			distlocktest.Run(t,
				func(t *testing.T) driver.Backend { return newLeaseBackend(t, tc.dsn, tc.opts...) },
				distlocktest.WithUnreachable(unreachableLease),
				distlocktest.WithLeakOptions(pgxCancelling...),
			)
		})
	}
}

// A waiter that polls once an hour is woken by the release's NOTIFY, sent
// through PgBouncer in transaction mode and heard on the waiter's direct
// LISTEN session, long before the holder's grant would expire.
func TestLeaseListenWakesWaiter(t *testing.T) {
	ctx, key := testCtx(t), "lease/listen/"+t.Name()
	bouncer := testserver.StartPgBouncer(t, server)
	holder := newLeaseBackend(t, bouncer.DSN)
	waiter := newLeaseBackend(t, bouncer.DSN, pglock.WithListen(server.DSN), pglock.WithPollInterval(time.Hour))

	l := acquire(t, holder, ctx, key, driver.AcquireOptions{TTL: 2 * time.Minute})
	got := make(chan error, 1)
	go func() {
		w, err := waiter.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			err = w.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "the waiter waits for a notification", func() bool { return waiter.LivePauses() > 0 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}

// leaseRow reads key's row of distlock_lease.
func leaseRow(t testing.TB, pool *pgxpool.Pool, key string) (grant *string, expires time.Time) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), `SELECT grant_id, expires FROM distlock_lease WHERE key = $1`, key).Scan(&grant, &expires); err != nil {
		t.Fatal(err)
	}
	return grant, expires
}

// Holders whose grants expired, the newest one now held by another,
// cannot release nor refresh the newer holder's row: both report
// ErrLockLost and the row's grant and expiry stay as the newer holder set
// them. (Each stale lease makes one call, so that both reach the server:
// a lease found lost answers the next call itself.)
func TestLeaseStaleOwner(t *testing.T) {
	ctx, key := testCtx(t), "lease/stale/"+t.Name()
	admin := newPool(t, server)
	a, b, c := newLeaseBackend(t, server.DSN), newLeaseBackend(t, server.DSN), newLeaseBackend(t, server.DSN)
	la := acquire(t, a, ctx, key, driver.AcquireOptions{TTL: 200 * time.Millisecond})
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lb, err := b.Acquire(wctx, key, driver.AcquireOptions{TTL: 200 * time.Millisecond, Wait: true})
	if err != nil {
		t.Fatalf("second holder after the first expired: %v", err)
	}
	lc, err := c.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("third holder after the second expired: %v", err)
	}
	defer lc.Release(ctx)
	grant, expires := leaseRow(t, admin, key)

	if err := la.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("stale Release: %v, want ErrLockLost", err)
	}
	if _, err := lb.Refresh(ctx, time.Hour); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("stale Refresh: %v, want ErrLockLost", err)
	}
	g, e := leaseRow(t, admin, key)
	if g == nil || grant == nil || *g != *grant || !e.Equal(expires) {
		t.Fatalf("a stale holder changed the newer grant's row: grant %v, expires %v; was %v, %v", g, e, grant, expires)
	}
	if _, err := lc.Refresh(ctx, time.Minute); err != nil {
		t.Errorf("newer holder's Refresh: %v", err)
	}
}

// A holder whose replies are slow (every packet to and from the server
// delayed) and whose grant is not renewed is reported lost (Err, exact on
// the local clock; its context ends soon after) before another client is
// granted the key: its validity is timed from before the request was
// sent, and the server's expiry from when it arrived.
func TestLeaseExpiryCancelsFirst(t *testing.T) {
	ctx, key := testCtx(t), "lease/expiry/"+t.Name()
	proxy := faultproxy.Start(t, addrOf(server))
	proxy.Delay(400 * time.Millisecond)
	const ttl = time.Second
	holder := newClient(t, newLeaseBackend(t, strings.Replace(server.DSN, addrOf(server), proxy.Addr(), 1)),
		distlock.WithTTL(ttl), distlock.WithRenewal(distlock.NoRenewal), distlock.WithSafetyMargin(ttl/10))
	next := newClient(t, newLeaseBackend(t, server.DSN, pglock.WithListen(server.DSN)))
	for round := range 3 {
		l, err := holder.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := next.Acquire(wctx, key)
		cancel()
		if err != nil {
			t.Fatalf("round %d: next holder: %v", round, err)
		}
		// Judged by the local clock, as distlocktest does: Err is exact,
		// and the context's cancellation follows when the watchdog runs.
		if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) {
			t.Fatalf("round %d: the key was granted (token %d) while the expired holder lived: Err() = %v, want ErrLockLost", round, n.Token(), err)
		}
		select {
		case <-l.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the expired holder's context lived 30s after its loss", round)
		}
		if n.Token() <= l.Token() {
			t.Errorf("round %d: token %d after %d", round, n.Token(), l.Token())
		}
		l.Release(ctx)
		if err := n.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A key's tokens increase across the two modes: they share its counter, so
// that moving a deployment from one mode to the other never makes its
// fenced writes look stale.
func TestTokensAcrossModes(t *testing.T) {
	ctx, key := testCtx(t), "modes/"+t.Name()
	session, lease := newBackend(t, server), newLeaseBackend(t, server.DSN)
	var last uint64
	for i, b := range []*pglock.Backend{session, lease, session, lease} {
		l := acquire(t, b, ctx, key, driver.AcquireOptions{})
		if l.Token() <= last {
			t.Errorf("grant %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// OpenURL's mode=lease opens a LeaseMode Backend, with LISTEN on
// listen_host; a mode it does not know, or listen_host in session mode, is
// a clear error.
func TestOpenURLLease(t *testing.T) {
	ctx := testCtx(t)
	bouncer := testserver.StartPgBouncer(t, server)
	b, err := pglock.OpenURL(ctx, bouncer.DSN+"&mode=lease&poll_interval=1h&listen_host="+addrOf(server))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	key := "url/lease/" + t.Name()
	l := acquire(t, b, ctx, key, driver.AcquireOptions{})
	hs, err := b.List(ctx, key)
	if err != nil || len(hs) != 1 || hs[0].Token != l.Token() || hs[0].Expires.IsZero() {
		t.Fatalf("List in lease mode: %+v, %v; want one grant with an expiry", hs, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ query, want string }{
		{"mode=table", `parameter "mode": want session or lease`},
		{"listen_host=" + addrOf(server), `parameter "listen_host": for mode=lease only`},
		{"mode=lease&listen_host=", `parameter "listen_host": empty`},
		{"mode=lease&poll_interval=0s", "poll interval 0s is not in"},
	} {
		_, err := pglock.OpenURL(ctx, "postgres://u:s3cret@127.0.0.1/db?"+tc.query)
		if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenURL(?%s): %v, want ErrInvalidOption saying %q", tc.query, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("OpenURL(?%s): the error shows the password: %v", tc.query, err)
		}
	}
}

// addrOf returns the host:port of a test server.
func addrOf(p *testserver.Postgres) string { return fmt.Sprintf("127.0.0.1:%d", p.Port) }

// Close releases a LeaseMode Backend's rows, telling their holders, so
// that the keys are free at once rather than when the grants expire.
func TestLeaseClose(t *testing.T) {
	ctx, key := testCtx(t), "lease/close/"+t.Name()
	b := newLeaseBackend(t, server.DSN)
	lost := make(chan error, 1)
	l := acquire(t, b, ctx, key, driver.AcquireOptions{TTL: time.Hour, OnLost: func(err error) { lost <- err }})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, distlock.ErrLockLost) {
			t.Errorf("OnLost(%v) at Close, want ErrLockLost", err)
		}
	default:
		t.Error("Close returned before telling the holder")
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release after Close: %v, want ErrLockLost", err)
	}
	other := acquire(t, newLeaseBackend(t, server.DSN), ctx, key, driver.AcquireOptions{})
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
