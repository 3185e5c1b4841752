package memlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// Holder reads exactly one key; WatchHolder wakes at a grant, a new
// owner, an expiry and a release, and ends with its context and with the
// Backend.
func TestHolderAndWatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := memlock.New()
	ch, err := b.WatchHolder(ctx, "svc/leader")
	if err != nil {
		t.Fatal(err)
	}
	woken := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s: no wake-up", what)
		}
	}
	other, err := b.Acquire(ctx, "svc/leader2", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if h, held, err := b.Holder(ctx, "svc/leader"); held || err != nil {
		t.Errorf(`Holder("svc/leader") = %+v, %v, %v while only "svc/leader2" is held`, h, held, err)
	}
	select {
	case <-ch:
		t.Error(`a grant of "svc/leader2" woke the watch of "svc/leader"`)
	default:
	}
	other.Release(ctx)

	l, err := b.Acquire(ctx, "svc/leader", driver.AcquireOptions{TTL: time.Minute, Owner: "a"})
	if err != nil {
		t.Fatal(err)
	}
	woken("grant")
	if h, held, err := b.Holder(ctx, "svc/leader"); !held || err != nil || h.Token != l.Token() || h.Owner != "a" || h.Expires.IsZero() {
		t.Errorf("Holder() = %+v, %v, %v; want token %d, owner a, an expiry", h, held, err, l.Token())
	}
	if err := l.(driver.OwnerSetter).SetOwner(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	woken("SetOwner")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	woken("release")
	if err := l.(driver.OwnerSetter).SetOwner(ctx, "c"); !errors.Is(err, driver.ErrLockLost) {
		t.Errorf("SetOwner after Release: %v, want ErrLockLost", err)
	}

	// An expiry wakes the watch too: whenever the key is seen held, a
	// wake-up follows its expiry (the grant's and the expiry's may come
	// as one).
	if _, err := b.Acquire(ctx, "svc/leader", driver.AcquireOptions{TTL: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	for {
		woken("grant or expiry")
		if _, held, err := b.Holder(ctx, "svc/leader"); err != nil || !held {
			break
		}
	}
	b.Close()
	for range ch { // closed with the Backend
	}
	if _, err := b.WatchHolder(ctx, "svc/leader"); !errors.Is(err, memlock.ErrClosed) {
		t.Errorf("WatchHolder after Close: %v, want ErrClosed", err)
	}
}
