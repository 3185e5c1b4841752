package pglock_test

import (
	"context"
	"errors"
	"go.uber.org/goleak"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// terminateHolders has the server end every session holding key's lock,
// shared or not, as an operator's pg_terminate_backend does; there must be
// at least one.
func terminateHolders(t testing.TB, admin *pgxpool.Pool, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := admin.QueryRow(ctx, terminateSQL, key).Scan(&n); err != nil || n < 1 {
		t.Fatalf("terminate the holders of %q: %d sessions, %v", key, n, err)
	}
}

// The conformance suite of shared locks: in session mode, and in
// lease-table mode directly (LISTEN on a session of its own), through
// PgBouncer in transaction mode with LISTEN on a direct session, and
// through PgBouncer polling.
func TestSharedConformance(t *testing.T) {
	admin := newPool(t, server)
	t.Run("Session", func(t *testing.T) {
		distlocktest.RunShared(t, func(t *testing.T) driver.Backend { return newBackend(t, server) },
			distlocktest.WithRevoke(func(t *testing.T, key string) { terminateHolders(t, admin, key) }))
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
			distlocktest.RunShared(t, func(t *testing.T) driver.Backend { return newLeaseBackend(t, tc.dsn, tc.opts...) },
				distlocktest.WithRevoke(func(t *testing.T, key string) { revokeLease(t, admin, key) }),
				distlocktest.WithLeakOptions(pgxCancelling...))
		})
	}
}

// revokeLease ends every lease-mode grant of key, exclusive or shared, as
// an operator does by hand; there must be at least one.
func revokeLease(t testing.TB, admin *pgxpool.Pool, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := admin.QueryRow(ctx, `WITH w AS (
	UPDATE distlock_lease SET expires = '-infinity' WHERE key = $1 AND expires > now() RETURNING 1
), r AS (
	UPDATE distlock_lease_reader SET expires = '-infinity' WHERE key = $1 AND expires > now() RETURNING 1
) SELECT (SELECT count(*) FROM w) + (SELECT count(*) FROM r)`, key).Scan(&n); err != nil || n < 1 {
		t.Fatalf("revoke the grants of %q: %d rows, %v", key, n, err)
	}
}

// sharedHeldSQL counts the sessions that hold key's advisory lock shared.
const sharedHeldSQL = `SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND mode = 'ShareLock' AND objsubid = 1
	AND ((classid::int8 << 32) | objid::int8) = hashtextextended($1, 0)`

// A psql session's pg_advisory_lock_shared(hashtextextended(key, 0))
// shares the key with the Backend's readers and keeps its writers out;
// its pg_advisory_lock keeps the Backend's readers out; and the other way
// round: the Backend's readers share with psql's shared lock and keep
// its exclusive one out.
func TestSharedInterop(t *testing.T) {
	ctx, key := testCtx(t), "interop/shared/"+t.Name()
	b, admin := newBackend(t, server), newPool(t, server)
	op := rawConn(t, server)
	tryShared := func() bool {
		t.Helper()
		var ok bool
		if err := op.QueryRow(ctx, `SELECT pg_try_advisory_lock_shared(hashtextextended($1, 0))`, key).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := op.Exec(ctx, sql, key); err != nil {
			t.Fatal(err)
		}
	}
	try := func(shared bool) (driver.Lease, error) {
		if shared {
			return b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		}
		return b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	}

	// The Backend's reader and psql's shared lock share the key.
	r, err := try(true)
	if err != nil {
		t.Fatalf("AcquireShared: %v", err)
	}
	if !tryShared() {
		t.Fatal("psql's pg_try_advisory_lock_shared refused while only the Backend's reader holds")
	}
	var ok bool
	if err := op.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, key).Scan(&ok); err != nil || ok {
		t.Fatalf("psql's pg_try_advisory_lock while the Backend's reader holds: %v, %v; want false", ok, err)
	}
	if hs, err := b.Readers(ctx, key); err != nil || len(hs) != 1 || hs[0].Token != r.Token() {
		t.Fatalf("Readers while the Backend's reader and psql hold: %+v, %v; want the Backend's reader only", hs, err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// psql's shared lock alone: the Backend's reader shares, its writer is
	// kept out, and waits for psql's unlock.
	if l, err := try(false); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("Acquire's try while psql holds the lock shared: %v; want ErrNotAcquired", err)
	}
	r, err = try(true)
	if err != nil {
		t.Fatalf("AcquireShared while psql holds the lock shared: %v", err)
	}
	if err := r.Release(ctx); err != nil {
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
	eventually(t, 10*time.Second, "the writer waits in the server", func() bool { return count(t, admin, waitingSQL, key) == 1 })
	select {
	case <-got:
		t.Fatal("the writer granted while psql holds the lock shared")
	default:
	}
	exec(`SELECT pg_advisory_unlock_shared(hashtextextended($1, 0))`)
	w := <-got
	if w == nil {
		t.FailNow()
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// psql's exclusive lock keeps the Backend's readers out, tries and
	// waits, until its unlock.
	exec(`SELECT pg_advisory_lock(hashtextextended($1, 0))`)
	if l, err := try(true); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("AcquireShared's try while psql holds the lock: %v; want ErrNotAcquired", err)
	}
	go func() {
		l, err := newBackend(t, server).AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("waiting AcquireShared: %v", err)
		}
		got <- l
	}()
	eventually(t, 10*time.Second, "the reader waits in the server", func() bool { return count(t, admin, waitingSQL, key) == 1 })
	select {
	case <-got:
		t.Fatal("the reader granted while psql holds the lock")
	default:
	}
	exec(`SELECT pg_advisory_unlock(hashtextextended($1, 0))`)
	r = <-got
	if r == nil {
		t.FailNow()
	}
	if n := count(t, admin, sharedHeldSQL, key); n != 1 {
		t.Fatalf("%d sessions hold the lock shared; want the reader's", n)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, admin, sharedHeldSQL, key); n != 0 {
		t.Fatalf("%d sessions hold the lock shared after the release; want none", n)
	}
}

// PostgreSQL's lock queue prefers writers: an exclusive request waiting
// behind the Backend's reader keeps later shared requests out, the
// Backend's tries and waits and psql's try alike, until it has been
// granted and has unlocked. The Backend relies on that for the order of
// its readers and writers.
func TestSharedWaitingWriterBlocksLaterReaders(t *testing.T) {
	ctx, key := testCtx(t), "shared/queue/"+t.Name()
	admin := newPool(t, server)
	r, err := newBackend(t, server).AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("AcquireShared: %v", err)
	}
	writer := rawConn(t, server)
	locked := make(chan error, 1)
	go func() {
		_, err := writer.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, key)
		locked <- err
	}()
	eventually(t, 10*time.Second, "psql's pg_advisory_lock waits in the server", func() bool { return count(t, admin, waitingSQL, key) == 1 })

	later := newBackend(t, server)
	if l, err := later.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("a later reader's try while a writer waits: %v; want ErrNotAcquired", err)
	}
	var ok bool
	if err := rawConn(t, server).QueryRow(ctx, `SELECT pg_try_advisory_lock_shared(hashtextextended($1, 0))`, key).Scan(&ok); err != nil || ok {
		t.Fatalf("psql's pg_try_advisory_lock_shared while a writer waits: %v, %v; want false", ok, err)
	}
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := later.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("waiting AcquireShared: %v", err)
		}
		got <- l
	}()
	eventually(t, 10*time.Second, "the later reader waits in the server", func() bool { return count(t, admin, waitingSQL, key) == 2 })
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatalf("psql's pg_advisory_lock: %v", err)
	}
	select {
	case <-got:
		t.Fatal("the later reader granted while the writer holds")
	default:
	}
	if n := count(t, admin, waitingSQL, key); n != 1 {
		t.Fatalf("%d requests wait while the writer holds; want the later reader's", n)
	}
	if _, err := writer.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= r.Token() {
		t.Fatalf("the later reader's token %d is not above the first's %d", l.Token(), r.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A reader of a key whose last exclusive grant was lost (its session was
// terminated while it held the lock) waits the loss grace, as a writer
// would, so that the lost holder may stop before anyone else acts; and
// it marks the lost grant accounted for, so that the next writer takes
// the one-UPDATE path and does not wait the grace again.
func TestSharedAfterLostGrantWaitsGrace(t *testing.T) {
	const grace = 2 * time.Second
	ctx, key := testCtx(t), "shared/grace/"+t.Name()
	admin := newPool(t, server)
	b := newBackend(t, server, pglock.WithLossGrace(grace))
	lost := make(chan error, 1)
	acquire(t, b, ctx, key, driver.AcquireOptions{OnLost: func(err error) { lost <- err }})
	terminateHolders(t, admin, key)
	if err := <-lost; !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("OnLost(%v); want ErrLockLost", err)
	}
	held := func() bool {
		t.Helper()
		var held bool
		if err := admin.QueryRow(ctx, `SELECT held FROM distlock_fence WHERE key = $1`, key).Scan(&held); err != nil {
			t.Fatal(err)
		}
		return held
	}
	if !held() {
		t.Fatal("the lost grant is not marked held")
	}
	start := time.Now()
	r, err := newBackend(t, server, pglock.WithLossGrace(grace)).AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("AcquireShared: %v", err)
	}
	if took := time.Since(start); took < grace {
		t.Errorf("the reader after a lost grant was granted in %v, within the loss grace (%v)", took, grace)
	}
	if held() {
		t.Error("the lost grant is still marked held once a reader waited the grace")
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A reader whose context ends while it waits in the server behind psql's
// exclusive lock returns context.Canceled and ErrNotAcquired, and leaves
// nothing: no shared lock, no request in the server's queue, no row of
// distlock_reader; the next reader is granted once psql unlocks.
func TestSharedCancelledWhileWaiting(t *testing.T) {
	ctx, key := testCtx(t), "shared/cancel/"+t.Name()
	admin := newPool(t, server)
	b := newBackend(t, server)
	op := rawConn(t, server)
	if _, err := op.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, key); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		l, err := b.AcquireShared(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			l.Release(ctx)
		}
		done <- err
	}()
	eventually(t, 10*time.Second, "the reader waits in the server", func() bool { return count(t, admin, waitingSQL, key) == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("AcquireShared cancelled while waiting: %v; want context.Canceled and ErrNotAcquired", err)
	}
	if n := count(t, admin, waitingSQL, key); n != 0 {
		t.Fatalf("%d requests still wait in the server once the cancelled AcquireShared returned", n)
	}
	if _, err := op.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, key); err != nil {
		t.Fatal(err)
	}
	if n := count(t, admin, sharedHeldSQL, key); n != 0 {
		t.Fatalf("%d sessions hold the lock shared after a cancelled AcquireShared", n)
	}
	if n := count(t, admin, `SELECT count(*) FROM distlock_reader WHERE key = $1`, key); n != 0 {
		t.Fatalf("%d rows of distlock_reader after a cancelled AcquireShared", n)
	}
	r, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("AcquireShared after the cancelled one: %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Within one Backend, a reader that arrives while the Backend's writer of
// the key holds it waits behind it (and its try fails), and readers of
// the Backend overlap.
func TestSharedBehindLocalWriter(t *testing.T) {
	ctx, key := testCtx(t), "shared/local/"+t.Name()
	b := newBackend(t, server)
	w, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("a reader's try while the Backend's writer holds: %v; want ErrNotAcquired", err)
	}
	got := make(chan driver.Lease, 2)
	for range 2 {
		go func() {
			l, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			if err != nil {
				t.Errorf("waiting AcquireShared: %v", err)
			}
			got <- l
		}()
	}
	eventually(t, 10*time.Second, "both readers wait for the Backend's writer", func() bool { return pglock.QueueWaiting(b, key) == 2 })
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	a, c := <-got, <-got
	if a == nil || c == nil {
		t.FailNow()
	}
	if a.Token() <= w.Token() || c.Token() <= w.Token() || a.Token() == c.Token() {
		t.Fatalf("readers' tokens %d and %d after the writer's %d: want distinct, above it", a.Token(), c.Token(), w.Token())
	}
	for _, l := range []driver.Lease{a, c} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// pgxCancelling are the goroutines pgx starts when a query's context
// ends: one sends the server a cancel request, and a connection closed
// because of it is drained until the server (here PgBouncer, which can be
// slow to answer) closes it. pgx bounds both by deadlines of its own (15 s
// at most); they belong to the pool's connections, not to the Backend,
// and may outlive a test that cancelled a query.
var pgxCancelling = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn.(*PgConn).asyncClose.func1"),
	goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn.(*CancelRequestContextWatcherHandler).HandleCancel.func1"),
}
