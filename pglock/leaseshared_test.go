package pglock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
)

// v7TrySQL is the exclusive try of a LeaseMode Backend of version 7 (its
// rowAcquireSQL without a queue place): a Backend of the previous version
// beside this one in a rolling upgrade.
const v7TrySQL = `SELECT granted FROM distlock_lease_wait($1, 'v7-writer', '', 60000, 0)`

// oldTrySQL is the exclusive try of the versions before the queue (1 to 3).
const oldTrySQL = `SELECT granted FROM distlock_lease_acquire($1, 'old-writer', '', 60000)`

// rawTry runs one of the earlier versions' tries and reports its token, 0
// when it was refused.
func rawTry(t *testing.T, pool *pgxpool.Pool, sql, key string) int64 {
	t.Helper()
	var token *int64
	if err := pool.QueryRow(testCtx(t), sql, key).Scan(&token); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if token == nil {
		return 0
	}
	return *token
}

// In lease mode readers share a key, and exclude writers both ways: this
// version's, and those of Backends of earlier versions, whose exclusive
// tries go through the replaced distlock_lease_wait and
// distlock_lease_acquire. Tokens: a reader's above every earlier
// writer's, a writer's above every earlier grant's. Readers and List
// report the readers; Holder the writer only.
func TestLeaseSharedExclusion(t *testing.T) {
	ctx, key := testCtx(t), "lease-shared/"+t.Name()
	admin := newPool(t, server)
	a, b := newLeaseBackend(t, server.DSN), newLeaseBackend(t, server.DSN)
	w0 := acquire(t, a, ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if _, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a reader's try while a writer holds: %v, want ErrNotAcquired", err)
	}
	if err := w0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r1, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "r2"})
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	if r1.Token() <= w0.Token() || r2.Token() <= w0.Token() || r1.Token() == r2.Token() {
		t.Errorf("tokens: writer %d, readers %d and %d", w0.Token(), r1.Token(), r2.Token())
	}
	if _, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer's try while readers hold: %v, want ErrNotAcquired", err)
	}
	if n := rawTry(t, admin, v7TrySQL, key); n != 0 {
		t.Fatalf("version 7's exclusive try was granted token %d while readers hold", n)
	}
	if n := rawTry(t, admin, oldTrySQL, key); n != 0 {
		t.Fatalf("the first versions' exclusive try was granted token %d while readers hold", n)
	}
	hs, err := b.Readers(ctx, key)
	if err != nil || len(hs) != 2 || hs[0].Token > hs[1].Token || !hs[0].Shared || hs[0].Expires.IsZero() {
		t.Fatalf("Readers: %+v, %v; want both readers by token", hs, err)
	}
	if ls, err := a.List(ctx, key); err != nil || len(ls) != 2 || !ls[0].Shared || !ls[1].Shared {
		t.Fatalf("List while readers hold: %+v, %v", ls, err)
	}
	if _, held, err := a.Holder(ctx, key); err != nil || held {
		t.Fatalf("Holder while readers alone hold: held=%v, %v; want free", held, err)
	}
	// An owner set on a reader is its own.
	if err := r1.(driver.OwnerSetter).SetOwner(ctx, "r1-renamed"); err != nil {
		t.Fatal(err)
	}
	if hs, _ := b.Readers(ctx, key); len(hs) != 2 || hs[0].Owner != "r1-renamed" && hs[1].Owner != "r1-renamed" {
		t.Errorf("Readers after SetOwner: %+v", hs)
	}
	for _, r := range []driver.Lease{r1, r2} {
		if _, err := r.Refresh(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.Release(ctx); !errors.Is(err, driver.ErrLockLost) {
			t.Errorf("a second Release: %v, want ErrLockLost", err)
		}
	}
	w := acquire(t, b, ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "w"})
	defer w.Release(ctx)
	if w.Token() <= max(r1.Token(), r2.Token()) {
		t.Errorf("writer's token %d after readers %d and %d", w.Token(), r1.Token(), r2.Token())
	}
	if _, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a reader's try while a writer holds: %v, want ErrNotAcquired", err)
	}
	if h, held, err := a.Holder(ctx, key); err != nil || !held || h.Token != w.Token() {
		t.Fatalf("Holder: %+v, held=%v, %v; want the writer", h, held, err)
	}
	if ls, err := a.List(ctx, key); err != nil || len(ls) != 1 || ls[0].Shared || ls[0].Token != w.Token() {
		t.Fatalf("List while the writer holds: %+v, %v", ls, err)
	}
}

// A reader that stops renewing is given back when its TTL runs out, and
// a waiting writer is granted then, told by the server when to try again
// (its polls are a minute or more apart, and the retry the server names
// is put off by a tenth of the poll interval at most, 12s); the reader's
// late Refresh reports the loss.
func TestLeaseReaderExpiryGrantsWriter(t *testing.T) {
	ctx, key := testCtx(t), "lease-shared/"+t.Name()
	a := newLeaseBackend(t, server.DSN)
	b := newLeaseBackend(t, server.DSN, pglock.WithPollInterval(2*time.Minute))
	keep := acquire(t, a, ctx, key+"/other", driver.AcquireOptions{TTL: time.Minute}) // another key's reader-free grant
	defer keep.Release(ctx)
	r, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	long, err := a.AcquireShared(ctx, key+"/long", driver.AcquireOptions{TTL: time.Minute}) // another key's reader
	if err != nil {
		t.Fatal(err)
	}
	defer long.Release(ctx)
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("waiting writer: %v", err)
		}
		got <- l
	}()
	var w driver.Lease
	select {
	case w = <-got:
	case <-time.After(50 * time.Second):
		t.Fatal("the waiting writer was not granted within 50s of a reader's 2s TTL (its polls are at least a minute apart)")
	}
	if w == nil {
		t.FailNow()
	}
	defer w.Release(ctx)
	if w.Token() <= r.Token() {
		t.Errorf("writer's token %d after the reader's %d", w.Token(), r.Token())
	}
	if _, err := r.Refresh(ctx, time.Minute); !errors.Is(err, driver.ErrLockLost) {
		t.Errorf("the expired reader's Refresh: %v, want ErrLockLost", err)
	}
	if hs, err := a.Readers(ctx, key); err != nil || len(hs) != 0 {
		t.Errorf("Readers after the reader expired: %+v, %v", hs, err)
	}
}

// A reader's release wakes a waiting writer through LISTEN (its polls
// are hours apart): the last reader's release notifies the head waiter.
func TestLeaseReaderReleaseWakesWriter(t *testing.T) {
	ctx, key := testCtx(t), "lease-shared/"+t.Name()
	admin := newPool(t, server)
	a := newLeaseBackend(t, server.DSN)
	b := newLeaseBackend(t, server.DSN, pglock.WithPollInterval(time.Hour), pglock.WithListen(server.DSN))
	r1, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("waiting writer: %v", err)
		}
		got <- l
	}()
	eventually(t, 20*time.Second, "the writer waits in the queue", func() bool { return queued(t, admin, key) == 1 })
	// A reader that comes after the waiting writer waits behind it.
	if _, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Hour}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a reader's try while a writer waits: %v, want ErrNotAcquired", err)
	}
	for _, r := range []driver.Lease{r1, r2} {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case w := <-got:
		if w == nil {
			t.FailNow()
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the waiting writer was not granted within 60s of the readers' release (its polls are ten hours apart)")
	}
}

// An uncontended lease-mode cycle costs two statements, Acquire and
// Release, exclusive or shared.
func TestLeaseCycleStatements(t *testing.T) {
	ctx, key := testCtx(t), "lease-shared/"+t.Name()
	b, sc := countedLeaseBackend(t, server.DSN)
	warm := acquire(t, b, ctx, key+"/warm", driver.AcquireOptions{TTL: time.Minute}) // checks the schema
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, shared := range []bool{false, true} {
		n0 := sc.n.Load()
		var (
			l   driver.Lease
			err error
		)
		if shared {
			l, err = b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		} else {
			l, err = b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n := sc.n.Load() - n0; n != 2 {
			t.Errorf("an uncontended cycle (shared %v) sent %d statements, want 2", shared, n)
		}
	}
}

// The readers of lease mode and session mode's do not exclude each
// other's writers: the modes hold different things (rows, advisory
// locks), as their exclusive grants do (see Not guaranteed).
func TestLeaseSharedAcrossModes(t *testing.T) {
	ctx, key := testCtx(t), "lease-shared/"+t.Name()
	lease, session := newLeaseBackend(t, server.DSN), newBackend(t, server)
	r, err := lease.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	w := acquire(t, session, ctx, key, driver.AcquireOptions{})
	defer w.Release(ctx)
	if w.Token() <= r.Token() {
		t.Errorf("session-mode writer's token %d after the lease-mode reader's %d: the key's counter is shared", w.Token(), r.Token())
	}
}

// Readers queued behind a writer that dies (it stops renewing and never
// releases) are all granted once its grant expires, which nobody
// notifies: they try again together, at the expiry the server told
// them, the first of them ends the expired grant and the others share
// the key. Each locks the key's row FOR UPDATE before it writes it; when
// readers locked it FOR SHARE and then wrote it, two that found the
// grant expired at once deadlocked (40P01, after the server's
// deadlock_timeout), and one of them failed.
func TestLeaseReadersAfterWriterDies(t *testing.T) {
	ctx, key := testCtx(t), "lease-shared/"+t.Name()
	admin := newPool(t, server)
	const n, backends = 16, 4
	writer := newLeaseBackend(t, server.DSN)
	w := acquire(t, writer, ctx, key, driver.AcquireOptions{TTL: time.Minute})
	readers := make([]*pglock.Backend, backends)
	for i := range readers {
		readers[i] = newLeaseBackend(t, server.DSN)
	}
	type result struct {
		l   driver.Lease
		err error
	}
	got := make(chan result, n)
	for i := range n {
		go func() {
			l, err := readers[i%backends].AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			got <- result{l, err}
		}()
	}
	eventually(t, time.Minute, "the readers wait in the queue", func() bool { return queued(t, admin, key) == n })
	// The writer's last renewal, and then it dies.
	if _, err := w.Refresh(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	tokens := map[uint64]bool{}
	for range n {
		select {
		case r := <-got:
			if r.err != nil {
				t.Errorf("a reader queued behind the dead writer: %v", r.err)
				continue
			}
			defer r.l.Release(ctx)
			if r.l.Token() <= w.Token() || tokens[r.l.Token()] {
				t.Errorf("reader's token %d: the writer's is %d, the readers' so far %v", r.l.Token(), w.Token(), tokens)
			}
			tokens[r.l.Token()] = true
		case <-time.After(90 * time.Second):
			t.Fatalf("%d readers of %d were granted within 90s of the dead writer's 1s TTL", len(tokens), n)
		}
	}
	if t.Failed() {
		return
	}
	if hs, err := readers[0].Readers(ctx, key); err != nil || len(hs) != n {
		t.Fatalf("Readers: %d of them, %v; want %d", len(hs), err, n)
	}
	if _, err := w.Refresh(ctx, time.Minute); !errors.Is(err, driver.ErrLockLost) {
		t.Errorf("the dead writer's late Refresh: %v, want ErrLockLost", err)
	}
}

// A reader's try refused for a writer that waits while nothing holds the
// key wakes that writer, as a writer's refused try does (see
// distlock_lease_wait): here the holder's row was freed by hand, which
// notifies nobody, and the writer, told to try again at the holder's
// expiry an hour away, polls every ten hours.
func TestLeaseRefusedReaderWakesWriter(t *testing.T) {
	ctx, key := testCtx(t), "lease-shared/"+t.Name()
	admin := newPool(t, server)
	holder := newLeaseBackend(t, server.DSN)
	writer := newLeaseBackend(t, server.DSN, pglock.WithPollInterval(time.Hour), pglock.WithListen(server.DSN))
	reader := newLeaseBackend(t, server.DSN)
	h := acquire(t, holder, ctx, key, driver.AcquireOptions{TTL: time.Hour})
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := writer.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("waiting writer: %v", err)
		}
		got <- l
	}()
	eventually(t, 20*time.Second, "the writer waits in the queue", func() bool { return queued(t, admin, key) == 1 })
	if _, err := admin.Exec(ctx, `UPDATE distlock_lease SET grant_id = NULL, expires = '-infinity' WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a reader's try while a writer waits: %v, want ErrNotAcquired", err)
	}
	select {
	case w := <-got:
		if w == nil {
			t.FailNow()
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the waiting writer was not woken by the refused reader within 60s (it polls every ten hours)")
	}
	if _, err := h.Refresh(ctx, time.Minute); !errors.Is(err, driver.ErrLockLost) {
		t.Errorf("the freed holder's Refresh: %v, want ErrLockLost", err)
	}
}

// A reader that comes while the Backend's writer is being queued behind
// another writer of the key waits behind it, until that writer's grant
// ends: a writer is counted, and takes its place in the Backend's queue,
// in one step, under the mutex the reader reads the count with. When the
// two steps were apart, a reader that found the writer counted could take
// its place in the queue first, and ask the server before it.
func TestLeaseReaderBehindQueuingWriter(t *testing.T) {
	ctx, key := testCtx(t), "lease-shared/"+t.Name()
	b := newLeaseBackend(t, server.DSN)
	w1 := acquire(t, b, ctx, key, driver.AcquireOptions{TTL: time.Minute})
	reader := make(chan driver.Lease, 1)
	pglock.OnWriterQueued(t, func(k string) {
		if k != key {
			return
		}
		before := pglock.RowQueueWaiting(b, key)
		go func() {
			l, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			if err != nil {
				t.Errorf("waiting reader: %v", err)
			}
			reader <- l
		}()
		for deadline := time.Now().Add(20 * time.Second); pglock.RowQueueWaiting(b, key) != before+1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("the reader did not wait in the Backend within 20s")
				return
			}
		}
	})
	writer := make(chan driver.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("waiting writer: %v", err)
		}
		writer <- l
	}()
	eventually(t, 30*time.Second, "the writer and then the reader wait in the Backend", func() bool { return pglock.RowQueueWaiting(b, key) == 2 })
	if err := w1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var w2 driver.Lease
	select {
	case w2 = <-writer:
		if w2 == nil {
			t.FailNow()
		}
	case r := <-reader:
		if r != nil {
			r.Release(ctx)
		}
		t.Fatal("the reader was granted before the writer queued before it")
	case <-time.After(60 * time.Second):
		t.Fatal("the waiting writer was not granted within 60s of the release")
	}
	select {
	case r := <-reader:
		if r != nil {
			r.Release(ctx)
		}
		t.Fatal("the reader was granted beside the writer queued before it")
	default:
	}
	if err := w2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-reader:
		if r == nil {
			t.FailNow()
		}
		if r.Token() <= w2.Token() {
			t.Errorf("reader's token %d after the writer's %d", r.Token(), w2.Token())
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the reader was not granted within 60s of the writer's release")
	}
}

// A reader granted between the two statements that revoke a key's
// readers (its reader rows, then its row: see the package doc) is
// revoked with them: a reader granted later on the key's row found free
// deletes every reader row of the key, not only the expired ones. When
// it deleted the expired ones only, the reader granted in between kept
// its row, renewed again once a later reader raised the key's row, and
// never learned that a writer held the key meanwhile.
func TestLeaseReaderRevokedBetweenStatements(t *testing.T) {
	ctx, key := testCtx(t), "lease-shared/"+t.Name()
	admin := newPool(t, server)
	a, b := newLeaseBackend(t, server.DSN), newLeaseBackend(t, server.DSN)
	r1, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Hour, Owner: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `UPDATE distlock_lease_reader SET expires = '-infinity' WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	r3, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Hour, Owner: "r3"})
	if err != nil {
		t.Fatalf("a reader between the two revoking statements: %v", err)
	}
	if _, err := admin.Exec(ctx, `UPDATE distlock_lease SET expires = '-infinity' WHERE key = $1 AND grant_id IS NULL`, key); err != nil {
		t.Fatal(err)
	}
	w := acquire(t, a, ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "w"})
	if w.Token() <= r3.Token() {
		t.Errorf("writer's token %d after the reader's %d", w.Token(), r3.Token())
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r4, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Hour, Owner: "r4"})
	if err != nil {
		t.Fatalf("a reader after the writer's release: %v", err)
	}
	defer r4.Release(ctx)
	if _, err := r3.Refresh(ctx, time.Hour); !errors.Is(err, driver.ErrLockLost) {
		t.Errorf("the revoked reader's Refresh after a writer held the key: %v, want ErrLockLost", err)
	}
	if _, err := r1.Refresh(ctx, time.Hour); !errors.Is(err, driver.ErrLockLost) {
		t.Errorf("the first revoked reader's Refresh: %v, want ErrLockLost", err)
	}
	if hs, err := a.Readers(ctx, key); err != nil || len(hs) != 1 || hs[0].Token != r4.Token() {
		t.Errorf("Readers: %+v, %v; want r4 alone", hs, err)
	}
}

// A writer queued while readers hold the key that leaves the queue (its
// context ends) wakes the waiter behind it: a reader there is let in at
// once. When a leave woke no one while the key was held, readers or
// writer, the reader slept until its next poll (an hour here).
func TestLeaseWriterLeavingWakesReader(t *testing.T) {
	ctx, key := testCtx(t), "lease-shared/"+t.Name()
	admin := newPool(t, server)
	holder := newLeaseBackend(t, server.DSN)
	writer := newLeaseBackend(t, server.DSN, pglock.WithPollInterval(time.Hour), pglock.WithListen(server.DSN))
	reader := newLeaseBackend(t, server.DSN, pglock.WithPollInterval(time.Hour), pglock.WithListen(server.DSN))
	r1, err := holder.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Hour, Owner: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	werr := make(chan error, 1)
	go func() {
		l, err := writer.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			l.Release(ctx)
		}
		werr <- err
	}()
	eventually(t, 20*time.Second, "the writer waits in the queue", func() bool { return queued(t, admin, key) == 1 })
	type result struct {
		l   driver.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := reader.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "r2", Wait: true})
		got <- result{l, err}
	}()
	eventually(t, 20*time.Second, "the reader waits behind the writer", func() bool { return queued(t, admin, key) == 2 })
	cancel()
	select {
	case err := <-werr:
		if err == nil {
			t.Fatal("the writer was granted while a reader holds the key")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the writer's Acquire did not return within 30s of its context's end")
	}
	select {
	case r2 := <-got:
		if r2.err != nil {
			t.Fatalf("waiting reader: %v", r2.err)
		}
		if err := r2.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the reader behind the leaving writer was not granted within 60s (it polls every hour)")
	}
}
