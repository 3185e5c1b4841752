package gatewaylock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/gatewaylock"
	"github.com/distlock/distlock/memlock"
)

func TestSharedOverMemlock(t *testing.T) {
	url := serveMem(t)
	distlocktest.RunShared(t, factory(url, gatewaylock.WithToken(adminSecret)), distlocktest.WithRevoke(revoker(url)))
}

// onlyLocks is a Backend that grants exclusive locks alone: the methods
// of driver.Backend, none of driver.SharedLocks.
type onlyLocks struct{ driver.Backend }

// Over a gateway whose lock service grants no shared locks, a shared
// acquire and a read of the readers fail with errors.ErrUnsupported, at
// once (not retried as an unavailable service), and leave the key free.
func TestSharedUnsupported(t *testing.T) {
	url := serve(t, onlyLocks{memlock.New()})
	b, err := gatewaylock.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer c.Close(ctx)
	for _, wait := range []bool{false, true} {
		l, err := c.Acquire(ctx, "r", distlock.WithShared(true), distlock.WithWait(wait))
		if !errors.Is(err, errors.ErrUnsupported) || errors.Is(err, distlock.ErrUnavailable) || ctx.Err() != nil {
			if err == nil {
				l.Release(ctx)
			}
			t.Fatalf("shared acquire (wait %v): %v; want ErrUnsupported at once", wait, err)
		}
	}
	if _, err := c.Readers(ctx, "r"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Readers: %v; want ErrUnsupported", err)
	}
	l, err := c.TryAcquire(ctx, "r")
	if err != nil {
		t.Fatalf("TryAcquire after the refused shared acquires: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
