package redlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/rwlock"
	"github.com/distlock/distlock/semaphore"
)

// Redlock grants no permits (see Semaphores in the package
// documentation): the Client refuses them, waiting or not, with an error
// matching errors.ErrUnsupported, and leaves nothing on any node.
func TestSemaphoreUnsupported(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3)
	b := newBackend(t, addrs(srvs))
	if _, ok := any(b).(driver.Semaphores); ok {
		t.Fatalf("redlock.Backend implements driver.Semaphores")
	}
	c, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	sem, err := semaphore.New(c, "unsupported", 2)
	if err != nil {
		t.Fatal(err)
	}
	for name, acquire := range map[string]func(context.Context) (*semaphore.Permit, error){
		"Acquire": sem.Acquire, "TryAcquire": sem.TryAcquire,
	} {
		p, err := acquire(ctx)
		if err == nil {
			p.Release(ctx)
			t.Fatalf("%s granted permit %d over redlock", name, p.Token())
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("%s: %v; want an error matching errors.ErrUnsupported", name, err)
		}
	}
	if _, _, err := sem.Holders(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Holders: %v; want an error matching errors.ErrUnsupported", err)
	}
	for _, s := range srvs {
		if n, err := s.Do("DBSIZE"); err != nil || n != int64(0) {
			t.Fatalf("DBSIZE on %s: %v, %v; want no key left", s.Addr, n, err)
		}
	}
}

// Redlock grants no shared locks (see Shared locks in the package
// documentation): the Client refuses them, waiting or not, with an error
// matching errors.ErrUnsupported, and leaves nothing on any node; the
// write lock of package rwlock, an ordinary lock, is granted.
func TestSharedUnsupported(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3)
	b := newBackend(t, addrs(srvs))
	if _, ok := any(b).(driver.SharedLocks); ok {
		t.Fatalf("redlock.Backend implements driver.SharedLocks")
	}
	c, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rw, err := rwlock.New(c, "unsupported")
	if err != nil {
		t.Fatal(err)
	}
	for name, acquire := range map[string]func(context.Context) (*distlock.Lock, error){
		"RLock": rw.RLock, "TryRLock": rw.TryRLock,
	} {
		l, err := acquire(ctx)
		if err == nil {
			l.Release(ctx)
			t.Fatalf("%s granted a shared lock %d over redlock", name, l.Token())
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("%s: %v; want an error matching errors.ErrUnsupported", name, err)
		}
	}
	if _, err := rw.Readers(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Readers: %v; want an error matching errors.ErrUnsupported", err)
	}
	for _, s := range srvs {
		if n, err := s.Do("DBSIZE"); err != nil || n != int64(0) {
			t.Fatalf("DBSIZE on %s: %v, %v; want no key left", s.Addr, n, err)
		}
	}
	w, err := rw.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock (an ordinary lock): %v", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
