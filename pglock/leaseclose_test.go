package pglock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

// Close tells a LeaseMode holder that its grant is lost before it frees
// the row: once the row is free another process may be granted the key,
// and the holder must have been told by then, as in SessionMode (where
// the holder is told before the connection holding the lock is closed).
func TestLeaseCloseTellsBeforeFreeing(t *testing.T) {
	ctx, key := testCtx(t), "lease/close-order/"+t.Name()
	b := newLeaseBackend(t, server.DSN)
	other := newLeaseBackend(t, server.DSN)
	heldWhenTold := make(chan bool, 1)
	acquire(t, b, ctx, key, driver.AcquireOptions{TTL: time.Hour, OnLost: func(error) {
		var held bool
		if err := other.Pool().QueryRow(context.Background(),
			`SELECT grant_id IS NOT NULL AND expires > now() FROM distlock_lease WHERE key = $1`, key).Scan(&held); err != nil {
			t.Errorf("reading the row in OnLost: %v", err)
		}
		heldWhenTold <- held
	}})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case held := <-heldWhenTold:
		if !held {
			t.Error("OnLost ran after Close had freed the row: another process could hold the key before the holder was told")
		}
	default:
		t.Fatal("Close returned before telling the holder")
	}
	l, err := other.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire after Close: %v, want the key free", err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
