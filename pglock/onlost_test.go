package pglock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// onLostDeadline bounds the wait for an OnLost that calls back into its
// lease: a Backend that called OnLost under the lease's own lock would
// never let it return.
const onLostDeadline = 10 * time.Second

// An OnLost that calls back into its lease (as the Client may, or a
// holder's own callback) returns: the Backend tells the holder without
// holding the lease's lock. Session mode, a holder whose session the
// server terminated.
func TestOnLostMayCallTheLease(t *testing.T) {
	ctx, key := testCtx(t), "onlost/"+t.Name()
	admin := newPool(t, server)
	b := newBackend(t, server)
	leaseOf := make(chan driver.Lease, 1)
	returned := make(chan error, 1)
	l := acquire(t, b, ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true, OnLost: func(error) {
		l := <-leaseOf
		l.Validity()
		_, rerr := l.Refresh(context.Background(), time.Minute)
		if !errors.Is(rerr, distlock.ErrLockLost) {
			t.Errorf("Refresh in OnLost: %v, want ErrLockLost", rerr)
		}
		returned <- l.Release(context.Background())
	}})
	leaseOf <- l
	terminateHolder(t, admin, key)
	select {
	case err := <-returned:
		if !errors.Is(err, distlock.ErrLockLost) {
			t.Errorf("Release in OnLost: %v, want ErrLockLost", err)
		}
	case <-time.After(onLostDeadline):
		t.Fatal("an OnLost that calls its lease did not return: the Backend calls it holding the lease's lock")
	}
}

// The same when Close ends the grants, in both modes.
func TestOnLostAtCloseMayCallTheLease(t *testing.T) {
	for _, mode := range []string{"session", "lease"} {
		t.Run(mode, func(t *testing.T) {
			ctx, key := testCtx(t), "onlost-close/"+t.Name()
			b := newBackend(t, server)
			if mode == "lease" {
				b = newLeaseBackend(t, server.DSN)
			}
			leaseOf := make(chan driver.Lease, 1)
			returned := make(chan error, 1)
			l := acquire(t, b, ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true, OnLost: func(error) {
				l := <-leaseOf
				l.Validity()
				returned <- l.Release(context.Background())
			}})
			leaseOf <- l
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				b.Close()
			}()
			select {
			case err := <-returned:
				if !errors.Is(err, distlock.ErrLockLost) {
					t.Errorf("Release in OnLost: %v, want ErrLockLost", err)
				}
			case <-time.After(onLostDeadline):
				t.Fatal("an OnLost that calls its lease did not return: the Backend calls it holding the lease's lock")
			}
			select {
			case <-closed:
			case <-time.After(onLostDeadline):
				t.Fatal("Close did not return")
			}
		})
	}
}
