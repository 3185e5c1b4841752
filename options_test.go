package distlock_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// Options that only a Client can use are not LockOptions: an acquisition
// given one does not compile. Every acquisition's option errors are
// KeyErrors matching ErrInvalidOption.
func TestLockOptionsRefused(t *testing.T) {
	lockOption := reflect.TypeFor[distlock.LockOption]()
	for name, opt := range map[string]distlock.Option{
		"WithOwner":         distlock.WithOwner("someone"),
		"WithLogger":        distlock.WithLogger(slog.Default()),
		"WithMeterProvider": distlock.WithMeterProvider(nil),
		"WithKeyLabel":      distlock.WithKeyLabel(func(string) string { return "" }),
	} {
		if reflect.TypeOf(opt).AssignableTo(lockOption) {
			t.Errorf("%s is a LockOption: an acquisition can be given it", name)
		}
	}

	ctx := context.Background()
	c := newClient(t, memlock.New())
	for name, opt := range map[string]distlock.LockOption{
		"WithTTL(0)":           distlock.WithTTL(0),
		"WithRenewal(-2s)":     distlock.WithRenewal(-2 * time.Second),
		"WithAtRiskWindow(-1)": distlock.WithAtRiskWindow(-1),
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

// A nil option is ignored wherever it is given: a LockOption left unset
// (set only when a flag is given) and passed to New is a non-nil Option
// holding a nil func.
func TestNilOptionsIgnored(t *testing.T) {
	var lockOpt distlock.LockOption
	var opt distlock.Option
	c, err := distlock.New(memlock.New(), lockOpt, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	l, err := c.Acquire(context.Background(), "k", lockOpt)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
