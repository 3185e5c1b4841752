package pglock_test

import (
	"errors"
	"os"
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
// back a distlock_lease_acquire that ignores readers. A Backend running
// since before then refuses new readers (errors.ErrUnsupported) and its
// reader is lost at its next renewal, before a writer could be granted
// beside it unseen; a Backend that starts afterwards migrates again, and
// readers are granted, and exclude writers, as before.
func TestLeaseSharedAfterEarlierMigrate(t *testing.T) {
	ctx, key := testCtx(t), "rolling/shared"
	s := newSharedDB(t)
	a := s.backend(t, s.app, pglock.WithMode(pglock.LeaseMode))
	r, err := a.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s.exec(t, s.app, schemaV7(t))
	if _, err := r.Refresh(ctx, time.Minute); !errors.Is(err, driver.ErrLockLost) {
		t.Errorf("a reader's Refresh under version 7's functions: %v, want ErrLockLost", err)
	}
	if l, err := a.AcquireShared(ctx, key+"/2", driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, errors.ErrUnsupported) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("AcquireShared under version 7's functions: %v, want errors.ErrUnsupported", err)
	}
	fresh := s.backend(t, s.app, pglock.WithMode(pglock.LeaseMode)) // started after the earlier Migrate
	r2, err := fresh.AcquireShared(ctx, key+"/3", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("AcquireShared by a Backend started after the earlier Migrate: %v", err)
	}
	defer r2.Release(ctx)
	if n := rawTry(t, s.pool(t, s.app), v7TrySQL, key+"/3"); n != 0 {
		t.Fatalf("version 7's exclusive try was granted token %d while a reader holds", n)
	}
	if _, err := a.Acquire(ctx, key+"/3", driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer's try while a reader holds: %v, want ErrNotAcquired", err)
	}
}
