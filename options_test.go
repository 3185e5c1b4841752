package distlock_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// Options that only a Client can use are refused by every acquisition, and
// every acquisition's option errors are KeyErrors matching
// ErrInvalidOption.
func TestLockOptionsRefused(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memlock.New())
	for name, opt := range map[string]distlock.Option{
		"WithOwner":  distlock.WithOwner("someone"),
		"WithLogger": distlock.WithLogger(slog.Default()),
		"WithTTL(0)": distlock.WithTTL(0),
	} {
		check := func(call string, err error) {
			t.Helper()
			var ke *distlock.KeyError
			if !errors.Is(err, distlock.ErrInvalidOption) || !errors.As(err, &ke) || ke.Op != "acquire" {
				t.Errorf("%s with %s: %v, want a KeyError matching ErrInvalidOption", call, name, err)
			}
		}
		// Whatever is granted by mistake is given back, so that a failure
		// does not block the next call.
		l, err := c.Acquire(ctx, "k", opt)
		check("Acquire", err)
		if err == nil {
			l.Release(ctx)
		}
		l, err = c.TryAcquire(ctx, "k", opt)
		check("TryAcquire", err)
		if err == nil {
			l.Release(ctx)
		}
		check("Do", c.Do(ctx, "k", func(context.Context) error { return nil }, opt))
		set, err := c.AcquireAll(ctx, []string{"k1", "k2"}, opt)
		check("AcquireAll", err)
		if err == nil {
			set.Release(ctx)
		}
	}
	// The Client itself takes them.
	if _, err := distlock.New(memlock.New(), distlock.WithOwner("me"), distlock.WithLogger(slog.Default()), distlock.WithTTL(time.Second)); err != nil {
		t.Errorf("New with Client options: %v", err)
	}
}
