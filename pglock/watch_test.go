package pglock_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// pushWait bounds the wait for a notification that a test expects. No
// poll of the Backend can wake the watch meanwhile (a test sets it to an
// hour), so it is a deadline for a missing notification, never a race.
const pushWait = 30 * time.Second

// expectWake waits for a value from a watch, failing t when the channel
// closes or nothing comes.
func expectWake(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the watch ended", what)
		}
	case <-time.After(pushWait):
		t.Fatalf("%s: the watch was not woken within %v", what, pushWait)
	}
}

// expectHolder checks what a reader reads of key: token 0 for free.
func expectHolder(t *testing.T, r driver.HolderReader, key string, token uint64, owner string) {
	t.Helper()
	h, held, err := r.Holder(testCtx(t), key)
	if err != nil || held != (token != 0) || h.Token != token || h.Owner != owner {
		t.Fatalf("Holder(%q) = %+v, %v, %v; want token %d, owner %q", key, h, held, err, token, owner)
	}
}

// A watch is woken by the server, in both modes, on every change of the
// key's holder made through another Backend: a grant, a SetOwner, a
// release and, in lease mode, a grant of a key whose grant expired. The
// SessionMode poll is set to an hour, and LeaseMode has none, so that
// every wake is a notification.
func TestWatchWokenByEveryChange(t *testing.T) {
	pglock.SetWatchPoll(t, time.Hour)
	for _, tc := range []struct {
		name    string
		backend func(t *testing.T) *pglock.Backend
	}{
		{"Session", func(t *testing.T) *pglock.Backend { return newBackend(t, server) }},
		{"Lease", func(t *testing.T) *pglock.Backend {
			return newLeaseBackend(t, server.DSN, pglock.WithListen(server.DSN))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, key := testCtx(t), "watch/every/"+t.Name()
			watcher, holder := tc.backend(t), tc.backend(t)
			ch, err := watcher.WatchHolder(ctx, key)
			if err != nil {
				t.Fatalf("WatchHolder: %v", err)
			}
			l, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "a"})
			if err != nil {
				t.Fatal(err)
			}
			expectWake(t, ch, "the grant")
			expectHolder(t, watcher, key, l.Token(), "a")
			if err := l.(driver.OwnerSetter).SetOwner(ctx, "b"); err != nil {
				t.Fatal(err)
			}
			expectWake(t, ch, "SetOwner")
			expectHolder(t, watcher, key, l.Token(), "b")
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			expectWake(t, ch, "the release")
			expectHolder(t, watcher, key, 0, "")
			if tc.name != "Lease" {
				return
			}
			// A grant left to expire, and the grant that takes the key
			// after it.
			lapsed, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: 200 * time.Millisecond, Owner: "lapses"})
			if err != nil {
				t.Fatal(err)
			}
			expectWake(t, ch, "the grant that lapses")
			next, err := tc.backend(t).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true, Owner: "next"})
			if err != nil {
				t.Fatal(err)
			}
			defer next.Release(ctx)
			if next.Token() <= lapsed.Token() {
				t.Fatalf("token %d after %d", next.Token(), lapsed.Token())
			}
			expectWake(t, ch, "the grant after the expiry")
			expectHolder(t, watcher, key, next.Token(), "next")
		})
	}
}

// In session mode a session that ends without releasing has its lock
// freed by the server silently: the watch's poll of the lock's session
// wakes the watcher.
func TestWatchSessionEndedSilently(t *testing.T) {
	pglock.SetWatchPoll(t, 20*time.Millisecond)
	ctx, key := testCtx(t), "watch/silent/"+t.Name()
	admin := newPool(t, server)
	watcher, holder := newBackend(t, server), newBackend(t, server)
	l, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := watcher.WatchHolder(ctx, key)
	if err != nil {
		t.Fatalf("WatchHolder: %v", err)
	}
	expectHolder(t, watcher, key, l.Token(), "a")
	terminateHolder(t, admin, key)
	expectWake(t, ch, "the end of the holder's session")
	expectHolder(t, watcher, key, 0, "")
}

// A watch ends when its Backend's LISTEN session breaks, since what was
// notified meanwhile is lost; the Backend connects again, and a new watch
// is woken as before.
func TestWatchEndsWithListenSession(t *testing.T) {
	pglock.SetWatchPoll(t, time.Hour)
	for _, tc := range []struct {
		name    string
		backend func(t *testing.T) *pglock.Backend
	}{
		{"Session", func(t *testing.T) *pglock.Backend {
			pool := newPool(t, server, "application_name=watch_listen")
			b, err := pglock.New(pool)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}},
		{"Lease", func(t *testing.T) *pglock.Backend {
			return newLeaseBackend(t, server.DSN, pglock.WithListen(server.DSN+"&application_name=watch_listen"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, key := testCtx(t), "watch/listen/"+t.Name()
			admin := newPool(t, server)
			watcher, holder := tc.backend(t), newBackend(t, server)
			if tc.name == "Lease" {
				holder = newLeaseBackend(t, server.DSN)
			}
			ch, err := watcher.WatchHolder(ctx, key)
			if err != nil {
				t.Fatalf("WatchHolder: %v", err)
			}
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
WHERE application_name = 'watch_listen' AND (query LIKE 'LISTEN%' OR query = '-- ping')`).Scan(&n); err != nil || n != 1 {
				t.Fatalf("terminate the LISTEN session: %d, %v", n, err)
			}
			deadline := time.After(pushWait)
			for open := true; open; {
				select {
				case _, open = <-ch:
				case <-deadline:
					t.Fatal("the watch did not end with its LISTEN session")
				}
			}
			// Until the session is back, WatchHolder reports the
			// Backend unavailable.
			for {
				ch, err = watcher.WatchHolder(ctx, key)
				if err == nil {
					break
				}
				if !errors.Is(err, driver.ErrUnavailable) {
					t.Fatalf("WatchHolder while LISTEN reconnects: %v", err)
				}
			}
			l, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			expectWake(t, ch, "a grant after the LISTEN session came back")
		})
	}
}

// Lease mode through PgBouncer in transaction mode: with LISTEN on a
// direct session a watch is woken as on a direct pool; without one the
// Backend cannot watch (LISTEN does not work through the pooler), and a
// Client's Watch polls, and still reports every change.
func TestWatchThroughPgBouncer(t *testing.T) {
	ctx, key := testCtx(t), "watch/pgbouncer/"+t.Name()
	bouncer := testserver.StartPgBouncer(t, server)
	holder := newLeaseBackend(t, bouncer.DSN)

	listening := newLeaseBackend(t, bouncer.DSN, pglock.WithListen(server.DSN))
	ch, err := listening.WatchHolder(ctx, key)
	if err != nil {
		t.Fatalf("WatchHolder with LISTEN on a direct session: %v", err)
	}
	polling := newLeaseBackend(t, bouncer.DSN)
	if _, err := polling.WatchHolder(ctx, key); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("WatchHolder through PgBouncer without LISTEN: %v, want errors.ErrUnsupported", err)
	}
	watch, err := newClient(t, polling).Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string, token uint64, owner string) {
		t.Helper()
		select {
		case h, ok := <-watch:
			if !ok || h.Token != token || h.Owner != owner {
				t.Fatalf("%s: Watch sent %+v, %v; want token %d, owner %q", what, h, ok, token, owner)
			}
		case <-time.After(pushWait):
			t.Fatalf("%s: nothing from Watch", what)
		}
	}
	next("the free key", 0, "")

	l, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	expectWake(t, ch, "the grant")
	next("the grant", l.Token(), "a")
	if err := l.(driver.OwnerSetter).SetOwner(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	expectWake(t, ch, "SetOwner")
	next("SetOwner", l.Token(), "b")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	expectWake(t, ch, "the release")
	next("the release", 0, "")
}

// TestWatchListenHalfOpen: a LISTEN session whose connection silently
// stops delivering (a network partition: no reset, no error) is pinged
// when idle, and ended when the ping gets no answer, which ends its
// watches; a Client's Watch of the key then reads again and reports the
// grant made meanwhile. Before, nothing checked the session, and the
// watch waited for TCP to give up.
func TestWatchListenHalfOpen(t *testing.T) {
	ctx, key := testCtx(t), "watch/halfopen"
	cfg, err := pgx.ParseConfig(server.DSN)
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	proxy := faultproxy.Start(t, target)
	listenDSN := strings.Replace(server.DSN, target, proxy.Addr(), 1)
	if listenDSN == server.DSN {
		t.Fatalf("no %s in the server's DSN", target)
	}
	watcher := newLeaseBackend(t, server.DSN, pglock.WithListen(listenDSN))
	holder := newLeaseBackend(t, server.DSN)
	w, err := newClient(t, watcher).Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if h := <-w; h.Token != 0 {
		t.Fatalf("first report %+v, want the free key", h)
	}
	proxy.Blackhole()
	t.Cleanup(proxy.Heal)
	l, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// The ping comes after 5s of silence and gets 5s (the request
	// timeout) to be answered.
	select {
	case h := <-w:
		if h.Token != l.Token() {
			t.Fatalf("Watch reported %+v, want token %d", h, l.Token())
		}
	case <-time.After(pushWait):
		t.Fatalf("Watch did not report grant %d within %v", l.Token(), pushWait)
	}
}

// TestWatchPoolConnectHooks: a SessionMode Backend whose pool has a
// BeforeConnect hook (here it supplies the address; a rotated credential
// is the usual case) cannot watch, since its LISTEN connection would not
// run the hook: WatchHolder reports errors.ErrUnsupported at once, and a
// Client's Watch polls. Before, the LISTEN connection failed, WatchHolder
// reported ErrUnavailable after driver.ConfirmWait on every call, and the
// listener redialled until Close.
func TestWatchPoolConnectHooks(t *testing.T) {
	ctx, key := testCtx(t), "watch/hooks"
	cfg, err := pgxpool.ParseConfig(server.DSN)
	if err != nil {
		t.Fatal(err)
	}
	host, port := cfg.ConnConfig.Host, cfg.ConnConfig.Port
	nowhere := closedAddr(t)
	i := strings.LastIndexByte(nowhere, ':')
	p, err := strconv.Atoi(nowhere[i+1:])
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = nowhere[:i], uint16(p)
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.Host, cc.Port = host, port
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b, err := pglock.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if _, err := b.WatchHolder(ctx, key); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("WatchHolder: %v, want errors.ErrUnsupported", err)
	}
	w, err := newClient(t, b).Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if h := <-w; h.Token != l.Token() {
		t.Fatalf("Watch reported %+v, want token %d", h, l.Token())
	}
}
