package driver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

func TestCheckAcquire(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	closed, cancelClosed := context.WithCancelCause(context.Background())
	cancelClosed(driver.ErrClosed)
	ok := driver.AcquireOptions{TTL: time.Second}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		key  string
		opts driver.AcquireOptions
		want []error // nil: no error
	}{
		{"valid", live, "k", ok, nil},
		{"longest TTL", live, "k", driver.AcquireOptions{TTL: driver.MaxTTL}, nil},
		{"empty key", live, "", ok, []error{driver.ErrInvalidKey}},
		{"control character", live, "a\nb", ok, []error{driver.ErrInvalidKey}},
		{"zero TTL", live, "k", driver.AcquireOptions{}, []error{driver.ErrInvalidOption}},
		{"negative TTL", live, "k", driver.AcquireOptions{TTL: -time.Second}, []error{driver.ErrInvalidOption}},
		{"TTL too long", live, "k", driver.AcquireOptions{TTL: driver.MaxTTL + 1}, []error{driver.ErrInvalidOption}},
		{"bad key before ended ctx", ended, "", ok, []error{driver.ErrInvalidKey}},
		{"bad TTL before ended ctx", ended, "k", driver.AcquireOptions{}, []error{driver.ErrInvalidOption}},
		{"ended ctx", ended, "k", ok, []error{driver.ErrNotAcquired, context.Canceled}},
		{"ended ctx with a cause", closed, "k", ok, []error{driver.ErrNotAcquired, context.Canceled, driver.ErrClosed}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := driver.CheckAcquire(tc.ctx, tc.key, tc.opts)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckAcquire: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("CheckAcquire accepted it")
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("CheckAcquire: %v, want a match of %v", err, w)
				}
			}
			if errors.Is(err, driver.ErrUnavailable) {
				t.Errorf("CheckAcquire: %v matches ErrUnavailable: the Client would retry it", err)
			}
		})
	}
}

func TestCheckTTLText(t *testing.T) {
	err := driver.CheckTTL(0)
	if want := "distlock: invalid option: TTL 0s is not in (0, 24h0m0s]"; err == nil || err.Error() != want {
		t.Fatalf("CheckTTL(0) = %v, want %q", err, want)
	}
}

func TestClosedError(t *testing.T) {
	err := driver.ClosedError("somelock")
	if !errors.Is(err, driver.ErrClosed) {
		t.Error("does not match distlock.ErrClosed")
	}
	if errors.Is(err, driver.ErrNotAcquired) || errors.Is(driver.ErrClosed, err) {
		t.Error("matches more than distlock.ErrClosed")
	}
	if !errors.Is(err, err) || errors.Is(err, driver.ClosedError("somelock")) {
		t.Error("a sentinel must match itself only")
	}
	if got := err.Error(); got != "somelock: backend closed" {
		t.Errorf("text %q", got)
	}
}

// fixed pauses d after every failure, up to n retries.
type fixed struct {
	d time.Duration
	n int
}

func (f fixed) Backoff(n int) (time.Duration, bool) { return f.d, n <= f.n }

func TestRetry(t *testing.T) {
	ctx := context.Background()
	fail := errors.New("still failing")

	t.Run("until success", func(t *testing.T) {
		calls := 0
		err := driver.Retry(ctx, fixed{n: 10}, func(context.Context) error {
			if calls++; calls < 3 {
				return fail
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Fatalf("Retry = %v after %d calls, want nil after 3", err, calls)
		}
	})
	t.Run("strategy gives up", func(t *testing.T) {
		calls := 0
		err := driver.Retry(ctx, fixed{n: 4}, func(context.Context) error { calls++; return fail })
		if !errors.Is(err, fail) || calls != 4 {
			t.Fatalf("Retry = %v after %d calls, want the last error after 4", err, calls)
		}
		calls = 0
		err = driver.Retry(ctx, driver.NoRetry, func(context.Context) error { calls++; return nil })
		if err == nil || calls != 0 {
			t.Fatalf("Retry with NoRetry = %v after %d calls, want an error and no call", err, calls)
		}
	})
	t.Run("context ends the pause", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		calls := 0
		done := make(chan error, 1)
		go func() {
			done <- driver.Retry(ctx, fixed{d: time.Hour, n: 10}, func(context.Context) error { calls++; return fail })
		}()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) || calls != 0 {
				t.Fatalf("Retry = %v after %d calls, want context.Canceled and no call", err, calls)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Retry did not stop when its context ended")
		}
	})
}
