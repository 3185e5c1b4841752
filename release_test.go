package distlock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// Releasing: what a release owes the service, whatever the caller's context.

// slowRelease: the release reply takes 50ms, and honours ctx.
type slowRelease struct{ *memlock.Backend }

func (s slowRelease) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	l, err := s.Backend.Acquire(ctx, key, o)
	if err != nil {
		return nil, err
	}
	return slowReleaseLease{l}, nil
}

type slowReleaseLease struct{ driver.Lease }

func (l slowReleaseLease) Release(ctx context.Context) error {
	select {
	case <-time.After(50 * time.Millisecond):
		return l.Lease.Release(context.Background())
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A release whose context ends mid-call is finished in the background.
func TestReleaseCutShortIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := memlock.New()
		c, _ := distlock.New(slowRelease{srv})
		l, err := c.Acquire(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if err := l.Release(ctx); err == nil {
			t.Error("a release cut short reported success")
		}
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		if hs, _ := srv.List(context.Background(), ""); len(hs) != 0 {
			t.Errorf("after Release and Close the key is still held: %+v", hs)
		}
	})
}

// Releasing with the lock's own context (cancelled by the release itself)
// still gives the key back.
func TestReleaseWithOwnContext(t *testing.T) {
	ctx := context.Background()
	srv := memlock.New()
	c := newClient(t, srv)
	l, _ := c.Acquire(ctx, "k")
	if err := l.Release(l.Context()); err != nil {
		t.Fatalf("Release(l.Context()): %v", err)
	}
	if _, err := srv.Acquire(ctx, "k", driver.AcquireOptions{TTL: time.Second}); err != nil {
		t.Fatalf("key not freed: %v", err)
	}
}

// Do releases the lock when fn panics.
func TestDoReleasesOnPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		c := newClient(t, srv, distlock.WithTTL(time.Second))
		func() {
			defer func() { recover() }()
			c.Do(ctx, "k", func(context.Context) error { panic("handler bug") })
		}()
		if hs, _ := srv.List(ctx, ""); len(hs) != 0 {
			t.Errorf("fn panicked and %q is still held", hs[0].Key)
		}
	})
}
