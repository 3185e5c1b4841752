package pglock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/metrictest"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// waitingSQL counts the sessions waiting for key's advisory lock.
const waitingSQL = `SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
	AND ((classid::int8 << 32) | objid::int8) = hashtextextended($1, 0)`

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// rawConn returns a connection of its own, as a psql session would be,
// closed when the test ends.
func rawConn(t testing.TB, srv *testserver.Postgres) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func acquire(t testing.TB, b driver.Backend, ctx context.Context, key string, opts driver.AcquireOptions) driver.Lease {
	t.Helper()
	if opts.TTL == 0 {
		opts.TTL = time.Minute
	}
	l, err := b.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return l
}

// An operator's pg_advisory_lock(hashtextextended(key, 0)) excludes the
// Backend, and the other way round, as psql sees it.
func TestInterop(t *testing.T) {
	ctx, key := testCtx(t), "interop/"+t.Name()
	b := newBackend(t, server)

	op := rawConn(t, server)
	if _, err := op.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, key); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("try while an operator holds the lock: %v, want ErrNotAcquired", err)
	}
	if _, err := op.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, b, ctx, key, driver.AcquireOptions{})
	defer l.Release(ctx)

	psql := testserver.PostgresBin(t, "psql")
	out, err := exec.CommandContext(ctx, psql, server.DSN, "-XtAc",
		"SELECT pg_try_advisory_lock(hashtextextended('"+strings.ReplaceAll(key, "'", "''")+"', 0))").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "f" {
		t.Fatalf("psql's pg_try_advisory_lock while the Backend holds the lock: %q, %v; want f", out, err)
	}
}

// A waiting Acquire increments the key's token only once it holds the
// lock: while it waits, the fence row is neither changed nor locked by it
// (a function that upserted the token before taking the lock would hold
// the row locked while it waits).
func TestTokenOnlyOnceHeld(t *testing.T) {
	ctx, key := testCtx(t), "order/"+t.Name()
	b, admin := newBackend(t, server), newPool(t, server)
	first := acquire(t, b, ctx, key, driver.AcquireOptions{})
	firstToken := first.Token()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}

	op := rawConn(t, server)
	if _, err := op.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, key); err != nil {
		t.Fatal(err)
	}
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := newBackend(t, server).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("waiting Acquire: %v", err)
		}
		got <- l
	}()
	eventually(t, 10*time.Second, "the Acquire waits in the server", func() bool { return count(t, admin, waitingSQL, key) == 1 })

	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var token int64
	err = tx.QueryRow(ctx, `SELECT token FROM distlock_fence WHERE key = $1 FOR UPDATE NOWAIT`, key).Scan(&token)
	tx.Rollback(ctx)
	if err != nil || uint64(token) != firstToken {
		t.Fatalf("fence row of a waiting Acquire: token %d, %v; want %d, unlocked", token, err, firstToken)
	}

	if _, err := op.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			return
		}
		defer l.Release(ctx)
		if l.Token() <= firstToken {
			t.Errorf("token %d after %d", l.Token(), firstToken)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted the lock after the operator released it")
	}
}

// Cancelling a waiting Acquire cancels its wait in the server too, at once:
// a client connection that is merely closed would go on waiting there.
func TestCancelEndsServerWait(t *testing.T) {
	ctx, key := testCtx(t), "cancel/"+t.Name()
	b, admin := newBackend(t, server), newPool(t, server)
	holder := acquire(t, b, ctx, key, driver.AcquireOptions{})
	defer holder.Release(ctx)

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := newBackend(t, server).Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		done <- err
	}()
	eventually(t, 10*time.Second, "the Acquire waits in the server", func() bool { return count(t, admin, waitingSQL, key) == 1 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Acquire: %v, want ErrNotAcquired and context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cancelled Acquire did not return")
	}
	eventually(t, 2*time.Second, "no session waits in the server", func() bool { return count(t, admin, waitingSQL, key) == 0 })
}

// pg_terminate_backend of the holding connection: the holder's context is
// cancelled before the next waiter is granted the key.
func TestTerminatedHolderLosesFirst(t *testing.T) {
	ctx, key := testCtx(t), "terminate/"+t.Name()
	admin := newPool(t, server)
	holder := newClient(t, newBackend(t, server))
	waiter := newClient(t, newBackend(t, server))

	l, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan bool, 1) // whether the holder's lock was done when the waiter got the key
	go func() {
		w, err := waiter.Acquire(ctx, key)
		if err != nil {
			t.Errorf("waiter: %v", err)
			granted <- false
			return
		}
		select {
		case <-l.Done():
			granted <- true
		default:
			granted <- false
		}
		w.Release(ctx)
	}()
	eventually(t, 10*time.Second, "the waiter waits in the server", func() bool { return count(t, admin, waitingSQL, key) == 1 })
	terminateHolder(t, admin, key)
	select {
	case ok := <-granted:
		if !ok {
			t.Fatal("the waiter was granted the key while the terminated holder's lock was live")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted the key after the holder was terminated")
	}
	if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("holder's Err: %v, want ErrLockLost", err)
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release after loss: %v, want ErrLockLost", err)
	}
}

// Tokens keep increasing across a crash and restart of the server, and a
// lock held meanwhile is reported lost.
func TestRestartKeepsTokens(t *testing.T) {
	ctx, key := testCtx(t), "restart/"+t.Name()
	srv := testserver.StartPostgres(t)
	b := newBackend(t, srv)
	var last uint64
	for range 3 {
		l := acquire(t, b, ctx, key, driver.AcquireOptions{})
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lost := make(chan error, 1)
	held := acquire(t, b, ctx, key, driver.AcquireOptions{OnLost: func(err error) { lost <- err }})
	last = held.Token()

	srv.Kill() // crash: the restart recovers from the WAL
	select {
	case err := <-lost:
		if !errors.Is(err, distlock.ErrLockLost) {
			t.Errorf("OnLost(%v), want ErrLockLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock held while the server crashed was not reported lost")
	}
	srv.Restart(t)

	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		if errors.Is(err, distlock.ErrUnavailable) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // the pool's connections from before the crash are failing
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Errorf("token %d after the restart, %d before", l.Token(), last)
		}
		l.Release(ctx)
		break
	}
}

// A stale holder's transaction is refused by Fence, and none of its writes
// commit; a newer holder's concurrent transaction wins even when the stale
// one admitted its token first, because the admitted row stays locked.
// Every refusal is counted.
func TestFence(t *testing.T) {
	ctx := testCtx(t)
	mp := metrictest.NewProvider()
	f := pglock.NewFence(fence.WithMeterProvider(mp))
	pool := newPool(t, server)
	if err := pglock.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	resource := "fence/" + t.Name() + "/" + rand.Text()[:8] // unique on a shared server
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS fenced_accounts (id text PRIMARY KEY, balance int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	write := func(token uint64, balance int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := f.Admit(ctx, tx, resource, token); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO fenced_accounts VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance`, resource, balance)
			return err
		})
	}
	balance := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT balance FROM fenced_accounts WHERE id = $1`, resource).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if err := write(33, 1); err != nil {
		t.Fatal(err)
	}
	if err := write(34, 2); err != nil {
		t.Fatal(err)
	}
	if err := write(34, 3); err != nil {
		t.Fatalf("a second write with the same token: %v", err)
	}
	err := write(33, 4)
	var stale *fence.StaleTokenError
	if !errors.Is(err, fence.ErrStaleToken) || !errors.As(err, &stale) || stale.Highest != 34 || stale.Token != 33 {
		t.Fatalf("write with a stale token: %v, want a StaleTokenError with Highest 34", err)
	}
	if got := balance(); got != 3 {
		t.Fatalf("balance %d after the stale write, want 3: the stale write committed", got)
	}

	// The stale holder admits first; the newer one waits for its end.
	staleTx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer staleTx.Rollback(ctx)
	if err := f.Admit(ctx, staleTx, resource, 35); err != nil {
		t.Fatal(err)
	}
	newer := make(chan error, 1)
	go func() { newer <- write(36, 6) }()
	select {
	case err := <-newer:
		t.Fatalf("the newer write did not wait for the older transaction: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := staleTx.Exec(ctx, `UPDATE fenced_accounts SET balance = 5 WHERE id = $1`, resource); err != nil {
		t.Fatal(err)
	}
	if err := staleTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-newer; err != nil {
		t.Fatalf("newer write: %v", err)
	}
	if got := balance(); got != 6 {
		t.Fatalf("balance %d, want 6", got)
	}

	// The SQL function, as any client or trigger calls it.
	_, err = pool.Exec(ctx, `SELECT distlock_admit($1, 35)`, resource)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "DL001" || pgErr.Detail != "36" {
		t.Fatalf("distlock_admit with a stale token: %v, want SQLSTATE DL001 with detail 36", err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return f.Admit(ctx, tx, resource, 0) }); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("Fence with token 0: %v, want ErrStaleToken", err)
	}
	if n := metrictest.Rejections(t, mp, "pglock.Fence"); n != 2 {
		t.Errorf("distlock.fence.rejections %d after two refused tokens (33 and 0), want 2", n)
	}
}

// List shows the keys held, with their token and owner, and not the keys
// released.
func TestList(t *testing.T) {
	ctx := testCtx(t)
	b := newBackend(t, server)
	prefix := "list/" + t.Name() + "/"
	a := acquire(t, b, ctx, prefix+"a", driver.AcquireOptions{Owner: "host:1"})
	defer a.Release(ctx)
	c := acquire(t, b, ctx, prefix+"c", driver.AcquireOptions{Owner: "host:2"})
	defer c.Release(ctx)
	gone := acquire(t, b, ctx, prefix+"b", driver.AcquireOptions{})
	if err := gone.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hs, err := b.List(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Key != prefix+"a" || hs[1].Key != prefix+"c" {
		t.Fatalf("List = %+v, want %sa and %sc", hs, prefix, prefix)
	}
	if hs[0].Token != a.Token() || hs[0].Owner != "host:1" || hs[1].Owner != "host:2" || hs[0].Since.IsZero() || !hs[0].Expires.IsZero() {
		t.Errorf("List = %+v", hs)
	}
}

// List creates and changes nothing, so that a role that may only read
// can list: with no schema it lists no holder, and a schema of an earlier
// version is listed as it is, not migrated.
func TestListCreatesNothing(t *testing.T) {
	for _, mode := range []pglock.Mode{pglock.SessionMode, pglock.LeaseMode} {
		for _, schema := range []string{"none", "v3", "current"} {
			t.Run(mode.String()+"/"+schema, func(t *testing.T) {
				ctx := testCtx(t)
				s := newSharedDB(t)
				s.exec(t, "postgres", "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
				reader := s.backend(t, s.app, pglock.WithMode(mode))
				objects := func() []string {
					var names []string
					if err := s.admin.QueryRow(ctx, `SELECT coalesce(array_agg(c.relname::text ORDER BY c.relname), '{}') FROM pg_class c
WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'distlock%'`).Scan(&names); err != nil {
						t.Fatal(err)
					}
					return names
				}
				if schema == "none" {
					hs, err := reader.List(ctx, "")
					if err != nil || len(hs) != 0 {
						t.Fatalf("List without a schema = %v, %v; want nothing", hs, err)
					}
					if names := objects(); len(names) > 0 {
						t.Fatalf("List created %v", names)
					}
					return
				}
				install := pglock.Schema
				if schema == "v3" {
					old, err := os.ReadFile("testdata/schema-v3.sql")
					if err != nil {
						t.Fatal(err)
					}
					install = string(old)
				}
				s.exec(t, "postgres", install)
				s.exec(t, "postgres", "GRANT SELECT ON ALL TABLES IN SCHEMA public TO "+s.app)
				key := "list/" + t.Name()
				writer := s.backend(t, "postgres", pglock.WithMode(mode))
				held := acquire(t, writer, ctx, key, driver.AcquireOptions{})
				defer held.Release(ctx)
				// The writer migrated an old schema: put it back.
				s.exec(t, "postgres", install)
				before := s.functions(t)
				hs, err := reader.List(ctx, "list/")
				if err != nil || len(hs) != 1 || hs[0].Key != key || hs[0].Token != held.Token() {
					t.Fatalf("List = %+v, %v; want %q with token %d", hs, err, key, held.Token())
				}
				if after := s.functions(t); after != before {
					t.Errorf("List changed the functions:\n%s\nto\n%s", before, after)
				}
			})
		}
	}
}

// A released key is granted to its waiter at once, hand-off after
// hand-off: only a lost grant makes the next one wait for the loss grace.
// (A release that unlocked before its mark as released was committed would
// make some waiters, woken in between, wait for the grace.)
func TestReleaseSkipsLossGrace(t *testing.T) {
	ctx, key := testCtx(t), "grace/"+t.Name()
	const handoffs = 300
	var wg sync.WaitGroup
	turns := make(chan struct{}, 1) // a token passed with the lock, so that the two alternate
	turns <- struct{}{}
	for range 2 {
		b := newBackend(t, server, pglock.WithLossGrace(time.Hour))
		wg.Go(func() {
			for range handoffs / 2 {
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				l, err := b.Acquire(actx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
				cancel()
				if err != nil {
					t.Errorf("Acquire after a release: %v (did it wait for the loss grace?)", err)
					return
				}
				<-turns
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
				turns <- struct{}{}
			}
		})
	}
	wg.Wait()
}

// OpenURL opens a working Backend from the URL form, takes this package's
// own options out of it, and never shows the password in an error.
func TestOpenURL(t *testing.T) {
	ctx := testCtx(t)
	b, err := pglock.OpenURL(ctx, strings.Replace(server.DSN, "postgres@", "postgres:s3cret%2Fpw@", 1)+"&loss_grace=0s&request_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	l := acquire(t, b, ctx, "url/"+t.Name(), driver.AcquireOptions{})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		url  string
		want error
	}{
		{"postgres://u:s3cret%2Fpw@" + closedAddr(t) + "/db?connect_timeout=2", distlock.ErrUnavailable},
		{"postgres://u:s3cret%2Fpw@127.0.0.1/db?loss_grace=soon", distlock.ErrInvalidOption},
		{"postgres://u:s3cret%2Fpw@127.0.0.1/db?sslmode=bogus", distlock.ErrInvalidOption},
		{"postgres://u:s3cret%2Fpw@127.0.0.1/db?loss_grace=-1s", distlock.ErrInvalidOption},
		{"redis://u:s3cret%2Fpw@127.0.0.1/", distlock.ErrInvalidOption},
		{"postgres://u:s3cret/pw@[::1/db", distlock.ErrInvalidOption},
	} {
		_, err := pglock.OpenURL(ctx, tc.url)
		if !errors.Is(err, tc.want) {
			t.Errorf("OpenURL(%s): %v, want %v", tc.url, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "pw@")) {
			t.Errorf("OpenURL(%s): the error shows the password: %v", tc.url, err)
		}
	}
}

// Release gives the connection back to the pool: a pool of one connection
// serves one grant after another.
func TestReleaseReturnsConnection(t *testing.T) {
	ctx := testCtx(t)
	b, err := pglock.New(newPool(t, server, "pool_max_conns=1"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := range 5 {
		l := acquire(t, b, ctx, "pool/"+t.Name(), driver.AcquireOptions{})
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
	}
	if n := b.Pool().Stat().TotalConns(); n != 1 {
		t.Errorf("%d connections, want the one, reused", n)
	}
}

// A release whose key's row no longer names its grant (a lease-mode grant
// of the key, which session mode does not exclude, took a token since)
// still unlocks on its connection and gives it back to the pool, rather
// than closing it.
func TestReleaseAfterTokenMoved(t *testing.T) {
	ctx, key := testCtx(t), "moved/"+t.Name()
	b, err := pglock.New(newPool(t, server, "pool_max_conns=1"), pglock.WithLossGrace(0))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l := acquire(t, b, ctx, key, driver.AcquireOptions{})
	ll := acquire(t, newLeaseBackend(t, server.DSN), ctx, key, driver.AcquireOptions{})
	if ll.Token() <= l.Token() {
		t.Fatalf("lease-mode token %d after %d", ll.Token(), l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := ll.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, next := range []*pglock.Backend{newBackend(t, server), b} {
		l := acquire(t, next, ctx, key, driver.AcquireOptions{})
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.Pool().Stat().NewConnsCount(); n != 1 {
		t.Errorf("%d connections made, want the one, given back by the release", n)
	}
}

// Close gives up the locks held, telling their holders, and ends a waiting
// Acquire with ErrClosed.
func TestClose(t *testing.T) {
	ctx, key := testCtx(t), "close/"+t.Name()
	admin := newPool(t, server)
	holder := newBackend(t, server)
	lost := make(chan error, 1)
	acquire(t, holder, ctx, key, driver.AcquireOptions{OnLost: func(err error) { lost <- err }})

	b := newBackend(t, server)
	other := acquire(t, b, ctx, key+"/other", driver.AcquireOptions{})
	done := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		done <- err
	}()
	eventually(t, 10*time.Second, "the Acquire waits in the server", func() bool { return count(t, admin, waitingSQL, key) == 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, distlock.ErrClosed) {
			t.Errorf("Acquire ended by Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end a waiting Acquire")
	}
	if err := other.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release after Close: %v, want ErrLockLost", err)
	}
	if _, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
	eventually(t, 10*time.Second, "the closed Backend's lock is free", func() bool {
		var got bool
		if err := admin.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AND pg_advisory_unlock(hashtextextended($1, 0))`, key+"/other").Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	})

	if err := holder.Close(); err != nil {
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
}
