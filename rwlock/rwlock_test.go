package rwlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/rwlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newClient(t *testing.T, b driver.Backend, opts ...distlock.Option) *distlock.Client {
	t.Helper()
	c, err := distlock.New(b, append([]distlock.Option{distlock.WithTTL(time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func TestNewRefusesBadInput(t *testing.T) {
	c := newClient(t, memlock.New())
	tests := []struct {
		name   string
		c      *distlock.Client
		lock   string
		target error
	}{
		{"nil client", nil, "k", distlock.ErrInvalidOption},
		{"empty name", c, "", distlock.ErrInvalidKey},
		{"name too long", c, strings.Repeat("x", distlock.MaxKeyLen+1), distlock.ErrInvalidKey},
		{"control character", c, "a\nb", distlock.ErrInvalidKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rw, err := rwlock.New(tc.c, tc.lock)
			if !errors.Is(err, tc.target) || rw != nil {
				t.Fatalf("New: %v, %v; want an error matching %v", rw, err, tc.target)
			}
		})
	}
}

// lockOnly is a backend that grants locks and no shared locks.
type lockOnly struct{ driver.Backend }

// A backend that cannot grant shared locks refuses them, rather than
// granting an exclusive lock in their place; its write locks are
// ordinary locks.
func TestSharedUnsupported(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, lockOnly{memlock.New()})
	rw, err := rwlock.New(c, "k")
	if err != nil {
		t.Fatal(err)
	}
	for name, acquire := range map[string]func(context.Context) (*distlock.Lock, error){
		"RLock": rw.RLock, "TryRLock": rw.TryRLock,
	} {
		if l, err := acquire(ctx); !errors.Is(err, errors.ErrUnsupported) {
			if err == nil {
				l.Release(ctx)
			}
			t.Fatalf("%s: %v; want errors.ErrUnsupported", name, err)
		}
	}
	if err := rw.RDo(ctx, func(context.Context) error { return nil }); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("RDo: %v; want errors.ErrUnsupported", err)
	}
	if _, err := rw.Readers(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Readers: %v; want errors.ErrUnsupported", err)
	}
	if err := rw.Do(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Do (the write lock): %v", err)
	}
}

// The options that make no sense with a shared lock are refused.
func TestSharedOptionConflicts(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memlock.New())
	for name, opts := range map[string][]distlock.LockOption{
		"WithSemaphore": {distlock.WithShared(true), distlock.WithSemaphore(distlock.Semaphore{Limit: 2})},
		"WithElection":  {distlock.WithShared(true), distlock.WithElection("e")},
		"WithWriter":    {distlock.WithShared(true), distlock.WithWriter(true)},
	} {
		if l, err := c.Acquire(ctx, "k", opts...); !errors.Is(err, distlock.ErrInvalidOption) {
			if err == nil {
				l.Release(ctx)
			}
			t.Fatalf("WithShared with %s: %v; want ErrInvalidOption", name, err)
		}
	}
}

// The options of WithLockOptions do not turn a read lock into a write lock
// or the reverse.
func TestLockOptionsCannotChangeTheKind(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memlock.New())
	rw, err := rwlock.New(c, "k", rwlock.WithLockOptions(distlock.WithShared(true), distlock.WithWait(false)))
	if err != nil {
		t.Fatal(err)
	}
	w, err := rw.Lock(ctx)
	if err != nil || w.Shared() {
		t.Fatalf("Lock: %v, shared %v; want a write lock", err, w != nil && w.Shared())
	}
	readers := make(chan error, 1)
	go func() {
		r, err := rw.RLock(ctx) // waits, whatever WithWait said
		if err == nil {
			if !r.Shared() {
				err = errors.New("RLock gave a lock that is not shared")
			}
			r.Release(ctx)
		}
		readers <- err
	}()
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-readers; err != nil {
		t.Fatalf("RLock: %v", err)
	}
}

// A lock set of shared locks shares each key with other readers; an
// exclusive set asked under a shared lock's context of one of its keys is
// refused with ErrUpgrade, and holds nothing.
func TestLockSets(t *testing.T) {
	ctx := context.Background()
	b := memlock.New()
	c, other := newClient(t, b), newClient(t, b)
	set, err := c.AcquireAll(ctx, []string{"a", "b"}, distlock.WithShared(true))
	if err != nil {
		t.Fatal(err)
	}
	r, err := other.TryAcquire(ctx, "b", distlock.WithShared(true))
	if err != nil {
		t.Fatalf("a reader's try while a shared set holds: %v", err)
	}
	r.Release(ctx)
	if _, err := c.AcquireAll(set.Context(), []string{"b", "c"}); !errors.Is(err, distlock.ErrUpgrade) {
		t.Fatalf("an exclusive set under a shared set's context: %v; want ErrUpgrade", err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := other.TryAcquire(ctx, "c")
	if err != nil {
		t.Fatalf("c after the refused set: %v; want it free", err)
	}
	w.Release(ctx)
}
