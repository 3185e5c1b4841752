package distlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// slotless is a backend whose permits cannot name their slot: memlock's
// permits with their SlotLease hidden.
type slotless struct{ *memlock.Backend }

func (b slotless) AcquirePermit(ctx context.Context, key string, sem driver.Semaphore, opts driver.AcquireOptions) (driver.Lease, error) {
	l, err := b.Backend.AcquirePermit(ctx, key, sem, opts)
	if err != nil {
		return nil, err
	}
	return struct{ driver.Lease }{l}, nil
}

// TestSlotsRefusedWithoutSlotLease: a permit asked with Slots of a backend
// whose lease names no slot is refused with errors.ErrUnsupported and
// given back, never held without its slot; through Faulty too, which
// names a slot only when the lease it wraps does.
func TestSlotsRefusedWithoutSlotLease(t *testing.T) {
	tests := []struct {
		name string
		wrap func(driver.Backend) driver.Backend
	}{
		{"plain", func(b driver.Backend) driver.Backend { return b }},
		{"Faulty", func(b driver.Backend) driver.Backend { return distlocktest.NewFaulty(b) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := memlock.New()
			t.Cleanup(func() { srv.Close() })
			c := newClient(t, tc.wrap(slotless{srv}))
			ctx := context.Background()
			l, err := c.Acquire(ctx, "s", distlock.WithSemaphore(distlock.Semaphore{Limit: 2, Slots: true}))
			if err == nil {
				slot, ok := l.Slot()
				l.Release(ctx)
				t.Fatalf("Acquire with Slots granted a permit of slot (%d, %v); want errors.ErrUnsupported", slot, ok)
			}
			if !errors.Is(err, errors.ErrUnsupported) {
				t.Fatalf("Acquire with Slots: %v; want errors.ErrUnsupported", err)
			}
			// Given back in the background, as a grant that cannot be
			// used is: wait for it, within a bound.
			for deadline := time.Now().Add(10 * time.Second); ; {
				st, err := srv.Permits(ctx, "s")
				if err == nil && st.Limit == 0 && len(st.Holders) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("10s after the refusal: %+v, %v; want no permit and no limit", st, err)
				}
				time.Sleep(time.Millisecond)
			}
			// Without Slots the same backend grants.
			l, err = c.Acquire(ctx, "s", distlock.WithSemaphore(distlock.Semaphore{Limit: 2}))
			if err != nil {
				t.Fatal(err)
			}
			if slot, ok := l.Slot(); ok {
				t.Errorf("Slot of a permit without Slots = %d, true", slot)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWithSemaphoreRefusesBadOptions: a limit out of range (even 0 with
// Slots, never a lock in its place) and a permit that is a candidacy are
// refused with ErrInvalidOption before the backend is asked.
func TestWithSemaphoreRefusesBadOptions(t *testing.T) {
	srv := memlock.New()
	t.Cleanup(func() { srv.Close() })
	c := newClient(t, srv)
	tests := []struct {
		name string
		opts []distlock.LockOption
	}{
		{"limit 0", []distlock.LockOption{distlock.WithSemaphore(distlock.Semaphore{})}},
		{"limit 0 with slots", []distlock.LockOption{distlock.WithSemaphore(distlock.Semaphore{Slots: true})}},
		{"negative limit", []distlock.LockOption{distlock.WithSemaphore(distlock.Semaphore{Limit: -1})}},
		{"limit above MaxPermits", []distlock.LockOption{distlock.WithSemaphore(distlock.Semaphore{Limit: driver.MaxPermits + 1})}},
		{"with an election", []distlock.LockOption{distlock.WithSemaphore(distlock.Semaphore{Limit: 2}), distlock.WithElection("e")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := c.Acquire(context.Background(), "s", tc.opts...)
			if err == nil {
				l.Release(context.Background())
				t.Fatal("Acquire granted; want ErrInvalidOption")
			}
			if !errors.Is(err, distlock.ErrInvalidOption) {
				t.Fatalf("Acquire: %v; want ErrInvalidOption", err)
			}
			if holders, err := srv.List(context.Background(), ""); err != nil || len(holders) != 0 {
				t.Fatalf("after the refusal: %v, %v; want nothing held", holders, err)
			}
		})
	}
}

func TestLockPermit(t *testing.T) {
	ctx := context.Background()
	c, err := distlock.New(memlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	l, err := c.Acquire(ctx, "permit/lock")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	p, err := c.Acquire(ctx, "permit/sem", distlock.WithSemaphore(distlock.Semaphore{Limit: 2}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(ctx)
	if l.Permit() || !p.Permit() {
		t.Fatalf("Permit: lock %v, permit %v", l.Permit(), p.Permit())
	}
}
