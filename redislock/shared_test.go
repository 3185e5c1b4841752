package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// A Backend made WithUnordered refuses shared locks (its exclusive
// waiters do not queue, so readers could not see them wait), with an
// error matching errors.ErrUnsupported, and grants nothing; its Acquire
// still excludes the shared grants of another Backend, and is granted
// once they are released, with a higher token.
func TestSharedUnordered(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	unordered := newBackend(t, srv.Addr, redislock.WithUnordered())
	key := "shared/unordered"
	if l, err := unordered.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, errors.ErrUnsupported) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("AcquireShared WithUnordered: %v; want ErrUnsupported", err)
	}
	ordered := newBackend(t, srv.Addr)
	if hs, err := ordered.Readers(ctx, key); err != nil || len(hs) != 0 {
		t.Fatalf("Readers after a refused AcquireShared: %v, %v; want none", hs, err)
	}
	r, err := ordered.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := unordered.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, driver.ErrNotAcquired) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("Acquire WithUnordered while a reader holds: %v; want ErrNotAcquired", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := unordered.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire WithUnordered once the reader is gone: %v", err)
	}
	if l.Token() <= r.Token() {
		t.Errorf("the writer's token %d is not above the reader's %d", l.Token(), r.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A shared grant's lease: a refresh of a released grant reports it lost,
// and a shared grant whose TTL ran out by the server's clock is lost and
// lets a waiting writer in, with a higher token.
func TestSharedLease(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	b := newBackend(t, srv.Addr)
	key := "shared/lease"
	r, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Refresh(ctx, time.Minute); !errors.Is(err, driver.ErrLockLost) {
		t.Fatalf("Refresh after Release: %v; want ErrLockLost", err)
	}
	short, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("a waiting Acquire behind a shared grant that lapses: %v", err)
	}
	if w.Token() <= short.Token() {
		t.Fatalf("the writer's token %d is not above the reader's %d", w.Token(), short.Token())
	}
	if _, err := short.Refresh(ctx, time.Minute); !errors.Is(err, driver.ErrLockLost) {
		t.Fatalf("Refresh of a lapsed shared grant: %v; want ErrLockLost", err)
	}
	if err := short.Release(ctx); !errors.Is(err, driver.ErrLockLost) {
		t.Fatalf("Release of a lapsed shared grant: %v; want ErrLockLost", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
