package driver

import (
	"context"
	"time"
)

// ConfirmWait bounds how long Wait waits for a new subscription to be
// confirmed before it tries again without the confirmation. A
// confirmation that comes later still wakes the waiter, so the bound
// matters only when none comes (a connection that broke): it is long
// enough that a slow server is not sent a try per waiter before its
// confirmation, and short enough not to hold a waiter whose release was
// missed for longer than a request's timeout.
const ConfirmWait = 2 * time.Second

// Held is a try's answer when the key is held: what tells the waiter to
// try again.
type Held struct {
	// Wake receives a value, or is closed, when the key may have been
	// freed: a release message, a watch that fired. It is nil when
	// nothing watched the key as the try ran; Wait then subscribes (see
	// Waiter.Subscribe).
	Wake <-chan struct{}

	// RetryIn is how long to wait at most for a wake-up before trying
	// again: the holder's expiry as the service reported it, a poll, a
	// pause after a transient failure. Zero sets no timer: only a
	// wake-up ends the wait then.
	RetryIn time.Duration
}

// Waiter is what differs between backends in a blocking Acquire: Wait
// runs the loop around it. Only Try is required.
type Waiter[L any] struct {
	// Try asks the service for the key once. It returns the grant (with a
	// nil *Held and a nil error), or a non-nil *Held when the key is
	// held, or an error that ends the wait. woke is true when the try
	// follows a wake-up (a receive on the last Held.Wake), and false for
	// the first try and after a timer, a subscription or a confirmation.
	//
	// Try may answer without a request (a grant that a release handed
	// over with its wake-up), and may loop over steps that need no
	// waiting (a watched node that is already gone). A transient failure
	// that keeps the waiter's place in the service's queue may be
	// answered as a Held with a backoff in RetryIn rather than an error.
	Try func(ctx context.Context, woke bool) (L, *Held, error)

	// Subscribe, if not nil, subscribes the waiter to the service's
	// wake-ups, after a try that found the key held and unwatched. It
	// returns a channel closed once the service confirmed the
	// subscription, or nil when no confirmation will come (the
	// subscription took effect at once, or was not made and the next
	// Held's RetryIn covers that): Wait tries again at once then. An
	// error ends the wait. The tries that follow return the
	// subscription's wake-up channel in their Held.
	Subscribe func(ctx context.Context) (ready <-chan struct{}, err error)

	// Leave, if not nil, is called once when Wait returns without a
	// grant, whatever the reason, so that the waiter leaves nothing in
	// the service's queue. It is not called after a grant.
	Leave func()

	// Closing, if not nil, ends the wait when it is closed (the backend's
	// Close, a session that ended); Wait then returns what Closed, which
	// must be set with it, returns (the backend's ErrClosed, why the
	// session ended).
	Closing <-chan struct{}
	Closed  func() error
}

// Wait runs a blocking Acquire: it tries for the key, and while the key is
// held it waits for a wake-up, or the Held's RetryIn, and tries again,
// until a try is granted or fails, ctx ends or Closing closes.
//
// Subscribe, then try again: a wake-up reaches only the waiters
// subscribed when the service sends it. After a try that found the key
// held and nothing watching it (Held.Wake nil), a release may come before
// the subscription takes effect; it reaches nobody, and a waiter that just
// waited would sleep on a free key until its timer. So Wait subscribes,
// waits for the service to confirm the subscription (at most ConfirmWait)
// and tries again at once: a release before the confirmation is seen by
// that try, a release after it wakes the waiter. A confirmation that comes
// after ConfirmWait wakes the waiter as a release does. A try that follows
// a subscription and is still unwatched waits for its RetryIn: a
// subscription that could not be made is tried again only after the next
// try. An uncontended Acquire thus costs one try, and subscribes only once
// a try found the key held.
//
// The end of ctx is reported first: an error from Canceled(ctx) (which
// matches ErrNotAcquired and ctx.Err()) when ctx has ended, whatever else
// happened, then Closed() when Closing is closed; both are checked before
// every try and after every wait. A Try or Subscribe error is returned as
// it is, or as Canceled(ctx) if ctx has ended. Leave is called once on
// every return without a grant.
//
// Wait starts no goroutine, and its one timer is stopped when it returns.
func Wait[L any](ctx context.Context, w Waiter[L]) (L, error) {
	var zero L
	// A Go 1.23 timer (the module's go line is newer): Reset and Stop
	// discard a value not yet received, so no drain is needed.
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	arm := func(d time.Duration) <-chan time.Time {
		switch {
		case d <= 0:
			if timer != nil {
				timer.Stop()
			}
			return nil
		case timer == nil:
			timer = time.NewTimer(d)
		default:
			timer.Reset(d)
		}
		return timer.C
	}
	fail := func(err error) (L, error) {
		if ctx.Err() != nil {
			err = Canceled(ctx)
		}
		if w.Leave != nil {
			w.Leave()
		}
		return zero, err
	}
	var (
		woke        bool            // the next try follows a wake-up
		subscribed  bool            // the last try followed a Subscribe
		unconfirmed <-chan struct{} // a confirmation that did not come within ConfirmWait
	)
	for {
		if err := w.ended(ctx); err != nil {
			return fail(err)
		}
		l, held, err := w.Try(ctx, woke)
		switch {
		case err != nil:
			return fail(err)
		case held == nil:
			return l, nil
		}
		woke = false
		if held.Wake == nil && w.Subscribe != nil && !subscribed {
			ready, err := w.Subscribe(ctx)
			if err != nil {
				return fail(err)
			}
			subscribed = true
			if ready != nil {
				select {
				case <-ready:
				case <-arm(ConfirmWait):
					unconfirmed = ready
				case <-ctx.Done():
				case <-w.Closing:
				}
			}
			continue
		}
		subscribed = false
		select {
		case <-held.Wake:
			woke = true
		case <-unconfirmed:
			unconfirmed = nil
		case <-arm(held.RetryIn):
		case <-ctx.Done():
		case <-w.Closing:
		}
	}
}

// ended returns why the wait must end, if it must: ctx's end first.
func (w *Waiter[L]) ended(ctx context.Context) error {
	if ctx.Err() != nil {
		return Canceled(ctx)
	}
	select {
	case <-w.Closing:
		return w.Closed()
	default:
		return nil
	}
}
