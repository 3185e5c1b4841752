package driver_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock/driver"
)

// The tests of Wait run in synctest bubbles: time is exact, and a
// goroutine left behind (Wait starts none) fails the test.

// fakeKey is one key of a lock service whose wake-ups reach only the
// waiter subscribed when they are sent, as Redis pub/sub does: a release
// before the subscription reaches nobody. It serves one waiter, whose
// Waiter it makes; grants are numbered by the try that got them.
type fakeKey struct {
	mu    sync.Mutex
	held  bool
	wake  chan struct{} // the waiter's subscription; nil until it subscribes
	tries []time.Duration
	woke  []bool // of each try
	start time.Time

	// handed is a grant that a release handed the waiter with its wake-up.
	handed int

	subscribes, leaves int

	// What the waiter's calls do: the Held's RetryIn, the confirmation
	// Subscribe returns, whether it subscribes at all, errors, and
	// hooks run before Try and Subscribe.
	retryIn        time.Duration
	ready          chan struct{}
	cannotWatch    bool
	tryErr         error
	subscribeErr   error
	beforeTry      func(n int)
	beforeSub      func()
	staleRecheck   bool // the try after a subscription answers without looking
	lastSubscribed int  // tries when the waiter last subscribed
}

func newFakeKey(held bool) *fakeKey {
	return &fakeKey{held: held, retryIn: time.Hour, start: time.Now()}
}

func (f *fakeKey) waiter() driver.Waiter[int] {
	return driver.Waiter[int]{
		Try: func(ctx context.Context, woke bool) (int, *driver.Held, error) {
			f.mu.Lock()
			n := len(f.tries) + 1
			hook := f.beforeTry
			f.mu.Unlock()
			if hook != nil {
				hook(n)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			f.tries = append(f.tries, time.Since(f.start))
			f.woke = append(f.woke, woke)
			if f.tryErr != nil {
				return 0, nil, f.tryErr
			}
			if woke && f.handed != 0 {
				return f.handed, nil, nil
			}
			if f.staleRecheck && f.lastSubscribed == n-1 {
				return 0, &driver.Held{Wake: f.wake, RetryIn: f.retryIn}, nil
			}
			if !f.held {
				f.held = true
				return n, nil, nil
			}
			return 0, &driver.Held{Wake: f.wake, RetryIn: f.retryIn}, nil
		},
		Subscribe: func(ctx context.Context) (<-chan struct{}, error) {
			if f.beforeSub != nil {
				f.beforeSub()
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			f.subscribes++
			f.lastSubscribed = len(f.tries)
			if f.subscribeErr != nil {
				return nil, f.subscribeErr
			}
			if !f.cannotWatch {
				f.wake = make(chan struct{}, 1)
			}
			if f.ready == nil {
				return nil, nil
			}
			return f.ready, nil
		},
		Leave: func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.leaves++
		},
	}
}

// release frees the key and wakes the waiter if it is subscribed.
func (f *fakeKey) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = false
	f.notifyLocked()
}

// handOff grants the key to the waiter with its wake-up, as a release
// that serves its queue does.
func (f *fakeKey) handOff(grant int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handed = grant
	f.notifyLocked()
}

func (f *fakeKey) notifyLocked() {
	if f.wake != nil {
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
}

// snapshot returns the tries (when each was sent, since the start) and
// the counts of subscriptions and leaves.
func (f *fakeKey) snapshot() (tries []time.Duration, woke []bool, subscribes, leaves int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tries), slices.Clone(f.woke), f.subscribes, f.leaves
}

type waitResult struct {
	grant int
	err   error
}

// startWait runs driver.Wait in a goroutine of the bubble.
func startWait(ctx context.Context, w driver.Waiter[int]) <-chan waitResult {
	res := make(chan waitResult, 1)
	go func() {
		g, err := driver.Wait(ctx, w)
		res <- waitResult{g, err}
	}()
	return res
}

func checkTries(t *testing.T, f *fakeKey, want []time.Duration, wantWoke []bool) {
	t.Helper()
	tries, woke, _, _ := f.snapshot()
	if !slices.Equal(tries, want) || !slices.Equal(woke, wantWoke) {
		t.Fatalf("tries at %v (woke %v), want at %v (woke %v)", tries, woke, want, wantWoke)
	}
}

// An uncontended wait is one try: no subscription, no timer, no Leave.
func TestWaitUncontended(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeKey(false)
		g, err := driver.Wait(t.Context(), f.waiter())
		if err != nil || g != 1 {
			t.Fatalf("Wait = %d, %v; want the first try's grant", g, err)
		}
		if _, _, subs, leaves := f.snapshot(); subs != 0 || leaves != 0 {
			t.Fatalf("%d subscriptions and %d leaves for an uncontended wait, want none", subs, leaves)
		}
	})
}

// The protocol: a try finds the key held and unwatched; the waiter
// subscribes, waits for the confirmation and only then tries again; that
// try is watched, so the waiter sleeps until the release wakes it, and
// the try after the wake-up says so.
func TestWaitSubscribesConfirmsThenTriesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeKey(true)
		f.ready = make(chan struct{})
		res := startWait(t.Context(), f.waiter())

		time.Sleep(time.Second) // the confirmation takes a second
		synctest.Wait()
		if _, _, subs, _ := f.snapshot(); subs != 1 {
			t.Fatalf("%d subscriptions after the first held try, want 1", subs)
		}
		checkTries(t, f, []time.Duration{0}, []bool{false})
		close(f.ready)
		synctest.Wait()
		checkTries(t, f, []time.Duration{0, time.Second}, []bool{false, false})

		time.Sleep(time.Minute) // well within RetryIn
		f.release()
		r := <-res
		if r.err != nil || r.grant != 3 {
			t.Fatalf("Wait = %d, %v; want the third try's grant", r.grant, r.err)
		}
		checkTries(t, f, []time.Duration{0, time.Second, time.Second + time.Minute}, []bool{false, false, true})
		if _, _, subs, leaves := f.snapshot(); subs != 1 || leaves != 0 {
			t.Fatalf("%d subscriptions and %d leaves, want 1 and 0", subs, leaves)
		}
	})
}

// A release between the first try and the subscription reaches nobody.
// A waiter that trusts its first try's answer after subscribing sleeps on
// a free key until its RetryIn (the fault); the try that Wait makes once
// subscribed finds the key free at once.
func TestWaitReleaseBeforeSubscription(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stale bool
		want  time.Duration
	}{
		{"StaleRecheck", true, time.Hour},
		{"Recheck", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeKey(true)
				f.staleRecheck = tc.stale
				f.beforeSub = f.release // before the subscription: wakes nobody
				r := <-startWait(t.Context(), f.waiter())
				if r.err != nil {
					t.Fatal(r.err)
				}
				if got := time.Since(f.start); got != tc.want {
					t.Fatalf("granted after %v, want %v", got, tc.want)
				}
				if tc.stale {
					t.Log("fault bites: without the try after subscribing, the waiter sleeps on a free key until its timer")
				}
			})
		})
	}
}

// A confirmation that does not come within ConfirmWait is waited for no
// longer: the waiter tries again then. When it comes later, it wakes the
// waiter (not as a release: woke is false).
func TestWaitConfirmWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeKey(true)
		f.ready = make(chan struct{})
		res := startWait(t.Context(), f.waiter())
		time.Sleep(driver.ConfirmWait + time.Second)
		synctest.Wait()
		checkTries(t, f, []time.Duration{0, driver.ConfirmWait}, []bool{false, false})

		close(f.ready) // late
		synctest.Wait()
		late := driver.ConfirmWait + time.Second
		checkTries(t, f, []time.Duration{0, driver.ConfirmWait, late}, []bool{false, false, false})

		f.release()
		if r := <-res; r.err != nil || r.grant != 4 {
			t.Fatalf("Wait = %d, %v; want the fourth try's grant", r.grant, r.err)
		}
	})
}

// A subscription that needs no confirmation (Subscribe returns nil) is
// followed by a try at once.
func TestWaitNoConfirmation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeKey(true)
		res := startWait(t.Context(), f.waiter())
		synctest.Wait()
		checkTries(t, f, []time.Duration{0, 0}, []bool{false, false})
		f.release()
		if r := <-res; r.err != nil || r.grant != 3 {
			t.Fatalf("Wait = %d, %v; want the third try's grant", r.grant, r.err)
		}
	})
}

// A subscription that could not be made leaves the tries unwatched: the
// waiter then sleeps its RetryIn, and subscribes again only after the
// next try, so that it never spins.
func TestWaitUnwatchedPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeKey(true)
		f.cannotWatch = true
		f.retryIn = time.Second
		ctx, cancel := context.WithCancel(t.Context())
		res := startWait(ctx, f.waiter())
		time.Sleep(2*time.Second + time.Millisecond)
		synctest.Wait()
		s := time.Second
		checkTries(t, f, []time.Duration{0, 0, s, s, 2 * s, 2 * s}, []bool{false, false, false, false, false, false})
		if _, _, subs, _ := f.snapshot(); subs != 3 {
			t.Fatalf("%d subscriptions, want one after each unwatched try that did not follow one (3)", subs)
		}
		cancel()
		if r := <-res; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Wait = %v, want the cancellation", r.err)
		}
	})
}

// Without a wake-up the waiter tries again after the Held's RetryIn.
func TestWaitRetryIn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeKey(true)
		f.retryIn = 5 * time.Second
		f.beforeTry = func(n int) {
			if n == 3 {
				f.release() // the holder's grant lapsed
			}
		}
		r := <-startWait(t.Context(), f.waiter())
		if r.err != nil || r.grant != 3 {
			t.Fatalf("Wait = %d, %v; want the third try's grant", r.grant, r.err)
		}
		checkTries(t, f, []time.Duration{0, 0, 5 * time.Second}, []bool{false, false, false})
	})
}

// A grant handed over with a wake-up is taken by the try after it, which
// knows it follows a wake-up.
func TestWaitHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeKey(true)
		res := startWait(t.Context(), f.waiter())
		time.Sleep(time.Second)
		synctest.Wait()
		f.handOff(42)
		if r := <-res; r.err != nil || r.grant != 42 {
			t.Fatalf("Wait = %d, %v; want the handed grant 42", r.grant, r.err)
		}
		checkTries(t, f, []time.Duration{0, 0, time.Second}, []bool{false, false, true})
	})
}

var errFakeClosed = driver.ClosedError("fakelock")

// Every way of ending a wait without a grant calls Leave exactly once
// (and a grant never), and the end of ctx is reported first: with the
// backend closed at the same time, the error still matches ctx.Err() and
// ErrNotAcquired, and not ErrClosed.
func TestWaitEnds(t *testing.T) {
	errTry := errors.New("fakelock: try failed")
	errSub := errors.New("fakelock: subscribe failed")
	type stage int
	const (
		beforeFirstTry stage = iota
		confirming           // waiting for the confirmation
		sleeping             // waiting for a wake-up
	)
	for _, tc := range []struct {
		name         string
		cancel, shut bool
		at           stage
		tryErr       error // from the second try
		subErr       error
		tryCancels   bool // the failing try ends ctx as it fails
		want         error
		wantTries    int
	}{
		{name: "CancelledBeforeFirstTry", cancel: true, at: beforeFirstTry, want: context.Canceled},
		{name: "ClosedBeforeFirstTry", shut: true, at: beforeFirstTry, want: errFakeClosed},
		{name: "BothBeforeFirstTry", cancel: true, shut: true, at: beforeFirstTry, want: context.Canceled},
		{name: "CancelledConfirming", cancel: true, at: confirming, want: context.Canceled, wantTries: 1},
		{name: "ClosedConfirming", shut: true, at: confirming, want: errFakeClosed, wantTries: 1},
		{name: "BothConfirming", cancel: true, shut: true, at: confirming, want: context.Canceled, wantTries: 1},
		{name: "CancelledSleeping", cancel: true, at: sleeping, want: context.Canceled, wantTries: 2},
		{name: "ClosedSleeping", shut: true, at: sleeping, want: errFakeClosed, wantTries: 2},
		{name: "BothSleeping", cancel: true, shut: true, at: sleeping, want: context.Canceled, wantTries: 2},
		{name: "TryFails", tryErr: errTry, want: errTry, wantTries: 2},
		{name: "TryFailsAsCancelled", tryErr: errTry, tryCancels: true, want: context.Canceled, wantTries: 2},
		{name: "SubscribeFails", subErr: errSub, want: errSub, wantTries: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFakeKey(true)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				closing := make(chan struct{})
				end := func() {
					if tc.cancel {
						cancel()
					}
					if tc.shut {
						close(closing)
					}
				}
				f.subscribeErr = tc.subErr
				if tc.at == confirming {
					f.ready = make(chan struct{}) // never confirmed
				}
				if tc.tryErr != nil {
					f.beforeTry = func(n int) {
						if n == 2 {
							f.mu.Lock()
							f.tryErr = tc.tryErr
							f.mu.Unlock()
							if tc.tryCancels {
								cancel()
							}
						}
					}
				}
				w := f.waiter()
				w.Closing, w.Closed = closing, func() error { return errFakeClosed }
				if tc.at == beforeFirstTry {
					end()
				}
				res := startWait(ctx, w)
				if tc.at != beforeFirstTry {
					time.Sleep(time.Second) // within ConfirmWait and RetryIn
					synctest.Wait()
					end()
				}
				r := <-res
				if !errors.Is(r.err, tc.want) {
					t.Fatalf("Wait = %d, %v; want %v", r.grant, r.err, tc.want)
				}
				if errors.Is(tc.want, context.Canceled) {
					if !errors.Is(r.err, driver.ErrNotAcquired) || errors.Is(r.err, errFakeClosed) {
						t.Fatalf("Wait = %v; want an error matching ErrNotAcquired and not ErrClosed", r.err)
					}
				}
				tries, _, _, leaves := f.snapshot()
				if len(tries) != tc.wantTries || leaves != 1 {
					t.Fatalf("%d tries and %d leaves, want %d and exactly 1", len(tries), leaves, tc.wantTries)
				}
			})
		})
	}
}
