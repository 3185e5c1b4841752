package pglock_test

import (
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
)

// earlierSchema is what an earlier version's Migrate runs: the objects of
// schema version 4, put back over those of this version in a rolling
// upgrade (an instance of the earlier version migrates when it starts).
func earlierSchema(t *testing.T) string {
	t.Helper()
	v4, err := os.ReadFile("testdata/schema-v4.sql")
	if err != nil {
		t.Fatal(err)
	}
	return string(v4)
}

// TestHolderAfterEarlierMigrate: after an earlier version's Migrate, a
// grant through its distlock_acquire leaves the pid of the grant before;
// a Backend running since before, or started after, still reads the key
// as held, with the grant's token.
func TestHolderAfterEarlierMigrate(t *testing.T) {
	ctx, key := testCtx(t), "rolling/holder"
	s := newSharedDB(t)
	a, b := s.backend(t, s.app), s.backend(t, s.app)
	// Each Backend migrates, and the key's row gets a's pid.
	for _, be := range []*pglock.Backend{b, a} {
		l, err := be.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "v5"})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.exec(t, s.app, earlierSchema(t))
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "after"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	fresh := s.backend(t, s.app) // started after the earlier Migrate
	for _, r := range []struct {
		name string
		b    *pglock.Backend
	}{{"running", a}, {"fresh", fresh}} {
		h, held, err := r.b.Holder(ctx, key)
		if err != nil || !held || h.Token != l.Token() || h.Owner != "after" {
			t.Errorf("%s Backend: Holder while %d is held: %+v, held=%v, %v", r.name, l.Token(), h, held, err)
		}
		ks, err := r.b.List(ctx, "rolling/")
		if err != nil || len(ks) != 1 || ks[0].Token != l.Token() {
			t.Errorf("%s Backend: List while %d is held: %+v, %v", r.name, l.Token(), ks, err)
		}
	}
}

// TestWatchAfterEarlierMigrate: a LeaseMode watch running when an earlier
// version's Migrate puts back functions that notify no watcher ends, and
// the next is refused with errors.ErrUnsupported, so that a Client's
// Watch polls and reports the grant; before, the Client waited for a
// notification that never came.
func TestWatchAfterEarlierMigrate(t *testing.T) {
	ctx, key := testCtx(t), "rolling/watch"
	s := newSharedDB(t)
	a := s.backend(t, s.app, pglock.WithMode(pglock.LeaseMode), pglock.WithListen(s.dsn(s.app)))
	b := s.backend(t, s.app, pglock.WithMode(pglock.LeaseMode))
	for _, be := range []*pglock.Backend{a, b} { // each migrates
		l, err := be.Acquire(ctx, "rolling/other", driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w, err := newClient(t, a).Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if h := <-w; h.Token != 0 {
		t.Fatalf("first report %+v, want the free key", h)
	}
	s.exec(t, s.app, earlierSchema(t))
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "x"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// A running watch sees the earlier functions when it renews its mark.
	select {
	case h := <-w:
		if h.Token != l.Token() {
			t.Fatalf("Watch reported %+v, want token %d", h, l.Token())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("Watch did not report grant %d within 40s", l.Token())
	}
}

// schemaV7 is the schema of version 7, whose lease-mode functions ignore
// readers.
func schemaV7(t *testing.T) string {
	t.Helper()
	v7, err := os.ReadFile("testdata/schema-v7.sql")
	if err != nil {
		t.Fatal(err)
	}
	return string(v7)
}

// TestLeaseSharedAfterEarlierMigrate: an earlier version's Migrate puts
// back version 7's lease functions, which know nothing of readers.
// Readers keep writers out all the same, through the key's row of
// distlock_lease: a reader granted before keeps renewing, new readers are
// granted, the exclusive tries of version 7 and of the versions before
// the queue are refused while readers hold, and a writer is granted once
// the last reader has released.
func TestLeaseSharedAfterEarlierMigrate(t *testing.T) {
	ctx, key := testCtx(t), "rolling/shared"
	s := newSharedDB(t)
	a := s.backend(t, s.app, pglock.WithMode(pglock.LeaseMode))
	r, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s.exec(t, s.app, schemaV7(t))
	if _, err := r.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("a reader's Refresh under version 7's functions: %v", err)
	}
	r2, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("AcquireShared under version 7's functions: %v", err)
	}
	pool := s.pool(t, s.app)
	for _, sql := range []string{v7TrySQL, oldTrySQL} {
		if n := rawTry(t, pool, sql, key); n != 0 {
			t.Fatalf("an earlier version's exclusive try was granted token %d while readers hold", n)
		}
	}
	if _, err := a.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer's try while readers hold: %v, want ErrNotAcquired", err)
	}
	for _, l := range []driver.Lease{r, r2} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := rawTry(t, pool, v7TrySQL, key); n <= int64(r2.Token()) {
		t.Fatalf("version 7's exclusive try after the readers released: token %d, want one above %d", n, r2.Token())
	}
}

// v7LeaseFunctions are version 7's lease-table functions that grant,
// renew and release, renamed v7_lease_*, over this version's tables: the
// bodies that a call of a Backend of version 7 runs when it began before
// the migration to version 8 committed (PostgreSQL runs the body it
// started with), or after an earlier version's Migrate.
func v7LeaseFunctions(t *testing.T) string {
	t.Helper()
	v7 := schemaV7(t)
	var out strings.Builder
	for _, name := range []string{"acquire", "wait", "refresh", "release"} {
		out.WriteString(schemaFunction(t, v7, "distlock_lease_"+name) + "\n")
	}
	sql := regexp.MustCompile(`@schema@\.distlock_lease_(acquire|wait|refresh|release)\(`).ReplaceAllString(out.String(), "public.v7_lease_$1(")
	return strings.ReplaceAll(sql, "@schema@.", "public.")
}

// TestLeaseSharedBesideVersion7Calls: version 7's exclusive grants,
// running their own bodies beside this version's readers (see
// v7LeaseFunctions), never hold a key with a live reader: a key that
// readers hold is refused to version 7's acquire and wait, and neither
// its release nor its refresh, of no grant, frees it. Then readers of two
// Backends and writers of version 7 (and of this version) race for one
// key: no writer ever holds it beside a reader or another writer. Before
// readers kept the key's row raised, version 7's acquire granted a writer
// beside a live reader.
func TestLeaseSharedBesideVersion7Calls(t *testing.T) {
	ctx, key := testCtx(t), "rolling/v7-beside-readers"
	s := newSharedDB(t)
	a := s.backend(t, s.app, pglock.WithMode(pglock.LeaseMode))
	b := s.backend(t, s.app, pglock.WithMode(pglock.LeaseMode))
	r, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute}) // migrates
	if err != nil {
		t.Fatal(err)
	}
	s.exec(t, s.app, v7LeaseFunctions(t))
	pool := s.pool(t, s.app)
	v7 := func(sql string, args ...any) *int64 {
		t.Helper()
		var v *int64
		if err := pool.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return v
	}
	const (
		v7AcquireSQL = `SELECT granted FROM v7_lease_acquire($1, $2, '', 60000)`
		v7WaitSQL    = `SELECT granted FROM v7_lease_wait($1, $2, '', 60000, 0)`
		v7ReleaseSQL = `SELECT v7_lease_release($1, $2)::int::int8`
		v7RefreshSQL = `SELECT v7_lease_refresh($1, $2, 60000)::int::int8`
	)
	for _, sql := range []string{v7AcquireSQL, v7WaitSQL} {
		if n := v7(sql, key, "v7-writer"); n != nil {
			t.Fatalf("%s: token %d while a reader holds", sql, *n)
		}
	}
	for _, sql := range []string{v7ReleaseSQL, v7RefreshSQL} {
		if n := v7(sql, key, nil); n == nil || *n != 0 {
			t.Fatalf("%s of no grant while a reader holds: %v, want false", sql, n)
		}
	}
	if n := v7(v7AcquireSQL, key, "v7-writer"); n != nil {
		t.Fatalf("version 7's acquire after its release and refresh of no grant: token %d while a reader holds", *n)
	}
	// Version 7's listing is this version's (the grants with a grant id):
	// readers are no exclusive holder.
	if _, held, err := b.Holder(ctx, key); err != nil || held {
		t.Fatalf("Holder while a reader holds: held=%v, %v", held, err)
	}
	if hs, err := b.List(ctx, key); err != nil || len(hs) != 1 || !hs[0].Shared || hs[0].Token != r.Token() {
		t.Fatalf("List while a reader holds: %+v, %v", hs, err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var (
		readers, writers  atomic.Int64
		readsN, writesN   atomic.Int64
		refusedForReaders atomic.Int64
		wg                sync.WaitGroup
	)
	overlap := func(what string) {
		t.Errorf("%s: %d readers and %d writers hold at once", what, readers.Load(), writers.Load())
	}
	hold := func() { time.Sleep(mathrand.N(2 * time.Millisecond)) }
	const rounds = 40
	done := make(chan struct{})
	for i := range 4 {
		be := []*pglock.Backend{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := be.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
				if err != nil {
					t.Errorf("reader: %v", err)
					return
				}
				readers.Add(1)
				if writers.Load() != 0 {
					overlap("a reader granted")
				}
				readsN.Add(1)
				hold()
				readers.Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("reader's release: %v", err)
					return
				}
				time.Sleep(mathrand.N(3 * time.Millisecond))
			}
		}()
	}
	var writersWG sync.WaitGroup
	for i := range 3 {
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				grant := fmt.Sprintf("v7-writer-%d-%d", i, n)
				var (
					token   *int64
					release func() bool
				)
				switch i {
				case 0, 1:
					token = v7([]string{v7AcquireSQL, v7WaitSQL}[i], key, grant)
					release = func() bool { return *v7(v7ReleaseSQL, key, grant) == 1 }
				default: // this version's writer
					l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
					if err == nil {
						tk := int64(l.Token())
						token = &tk
						release = func() bool { return l.Release(ctx) == nil }
					} else if !errors.Is(err, driver.ErrNotAcquired) {
						t.Errorf("writer: %v", err)
						return
					}
				}
				if token == nil {
					if readers.Load() > 0 {
						refusedForReaders.Add(1)
					}
					time.Sleep(mathrand.N(2 * time.Millisecond))
					continue
				}
				if writers.Add(1) != 1 || readers.Load() != 0 {
					overlap(fmt.Sprintf("writer %s granted token %d", grant, *token))
				}
				writesN.Add(1)
				hold()
				writers.Add(-1)
				if !release() {
					t.Errorf("writer %s: its release found its grant gone", grant)
				}
				time.Sleep(mathrand.N(5 * time.Millisecond))
			}
		}()
	}
	wg.Wait()
	// With the readers done, the writers are granted.
	after := writesN.Load()
	eventually(t, time.Minute, "a writer granted after the readers", func() bool { return writesN.Load() > after })
	close(done)
	writersWG.Wait()
	t.Logf("%d reads, %d writes, %d writers' tries refused while readers held", readsN.Load(), writesN.Load(), refusedForReaders.Load())
	if readsN.Load() != 4*rounds {
		t.Errorf("%d reads, want %d", readsN.Load(), 4*rounds)
	}
}
