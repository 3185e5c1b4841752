package distlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// hookBackend is memlock with a hook that sees the context each Acquire
// is given.
type hookBackend struct {
	*memlock.Backend
	hook func(ctx context.Context)
}

func (b *hookBackend) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	b.hook(ctx)
	return b.Backend.Acquire(ctx, key, opts)
}

type acquireCtxKey struct{}

// The context a Backend is given for an acquisition whose caller's context
// never ends behaves as a context: the caller's values, no deadline, not
// done until Close; what the backend derives from it (WithCancelCause,
// WithTimeout, WithoutCancel, AfterFunc) works as it would on any context,
// and Close ends it, and what derives from it, with cause ErrClosed.
func TestAcquireContextOfNeverEndingCaller(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{
		{"background", context.Background()},
		{"values", context.WithValue(context.Background(), acquireCtxKey{}, "v")},
		{"without cancel", context.WithoutCancel(context.WithValue(context.Background(), acquireCtxKey{}, "v"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errMine := errors.New("mine")
			var (
				mu         sync.Mutex
				fired      []error // causes seen by the AfterFuncs left registered
				ranStopped int     // runs of AfterFuncs stopped in Acquire
				derived    []context.Context
				cancels    []context.CancelFunc
			)
			defer func() {
				for _, cancel := range cancels {
					cancel()
				}
			}()
			b := &hookBackend{Backend: memlock.New()}
			b.hook = func(ctx context.Context) {
				if got, want := ctx.Value(acquireCtxKey{}), tc.ctx.Value(acquireCtxKey{}); got != want {
					t.Errorf("value %v, want %v", got, want)
				}
				if _, ok := ctx.Deadline(); ok {
					t.Error("a deadline the caller did not set")
				}
				if ctx.Err() != nil || context.Cause(ctx) != nil {
					t.Errorf("done before Close: %v, %v", ctx.Err(), context.Cause(ctx))
				}
				wc := context.WithoutCancel(ctx)
				if wc.Done() != nil || context.Cause(wc) != nil || wc.Value(acquireCtxKey{}) != tc.ctx.Value(acquireCtxKey{}) {
					t.Error("WithoutCancel of it: cancellable, or values lost")
				}
				d, cancel := context.WithCancelCause(ctx)
				cancel(errMine)
				if context.Cause(d) != errMine || ctx.Err() != nil {
					t.Errorf("derived cause %v, parent err %v", context.Cause(d), ctx.Err())
				}
				tctx, tcancel := context.WithTimeout(ctx, time.Nanosecond)
				<-tctx.Done()
				if !errors.Is(tctx.Err(), context.DeadlineExceeded) || ctx.Err() != nil {
					t.Errorf("timeout: %v, parent err %v", tctx.Err(), ctx.Err())
				}
				tcancel()
				stop := context.AfterFunc(ctx, func() {
					mu.Lock()
					ranStopped++
					mu.Unlock()
				})
				if !stop() {
					t.Error("an AfterFunc on it could not be stopped")
				}
				context.AfterFunc(ctx, func() {
					mu.Lock()
					fired = append(fired, context.Cause(ctx))
					mu.Unlock()
				})
				keep, cancelKeep := context.WithCancel(ctx) // ended by Close, checked below
				mu.Lock()
				derived, cancels = append(derived, keep), append(cancels, cancelKeep)
				mu.Unlock()
			}
			c, err := distlock.New(b)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				l, err := c.Acquire(tc.ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(tc.ctx); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.TryAcquire(tc.ctx, "k"); err != nil {
				t.Fatal(err) // released by Close
			}
			mu.Lock()
			if len(fired) != 0 {
				t.Errorf("an AfterFunc on the acquisition's context ran before Close (%v)", fired)
			}
			mu.Unlock()
			if err := c.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				n := len(fired)
				mu.Unlock()
				if n == 4 || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if ranStopped != 0 {
				t.Errorf("%d AfterFuncs stopped in Acquire ran", ranStopped)
			}
			if len(fired) != 4 {
				t.Fatalf("%d AfterFuncs ran at Close, want 4", len(fired))
			}
			for _, cause := range fired {
				if cause != distlock.ErrClosed {
					t.Errorf("cause at Close %v, want ErrClosed", cause)
				}
			}
			for _, d := range derived {
				if context.Cause(d) != distlock.ErrClosed {
					t.Errorf("derived context's cause at Close %v, want ErrClosed", context.Cause(d))
				}
			}
		})
	}
}

// Close while many acquisitions whose contexts never end wait and cycle on
// one key: every one ends, acquired or with ErrClosed, and nothing is left
// running (goleak in TestMain).
func TestCloseDuringNeverEndingAcquires(t *testing.T) {
	for round := range 20 {
		c, err := distlock.New(memlock.New())
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		started := make(chan struct{}, 16)
		for i := range 16 {
			wg.Go(func() {
				ctx := context.Background()
				if i%2 == 1 {
					ctx = context.WithValue(ctx, acquireCtxKey{}, i)
				}
				for n := 0; ; n++ {
					if n == 3 {
						started <- struct{}{}
					}
					l, err := c.Acquire(ctx, "k")
					if err != nil {
						if !errors.Is(err, distlock.ErrClosed) {
							t.Errorf("round %d: Acquire: %v, want ErrClosed", round, err)
						}
						if n < 3 {
							started <- struct{}{}
						}
						return
					}
					_ = l.Context() // made while others wait and Close runs
					l.Release(ctx)
				}
			})
		}
		for range 16 {
			<-started
		}
		if err := c.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}
