package driver

import (
	"context"
	"errors"
	"time"
)

// Retry goes on with op after it has failed once, typically in a goroutine
// that cleans up what a failed request may have left in the service: after
// the n-th failure it pauses as s says (n is 1 after the failure the caller
// saw), then calls op again, until op returns nil, s gives up or ctx ends.
// op returns nil also for an error that a retry cannot fix. Retry returns
// nil once op succeeds, ctx.Err() if ctx ended first, and otherwise op's
// last error (errGaveUp if s gave up before any retry).
//
// s is usually distlock.ExponentialBackoff (full jitter, so that clients
// that failed together do not retry together), bounded with distlock.Limit
// or by ctx.
func Retry(ctx context.Context, s RetryStrategy, op func(context.Context) error) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var err error
	for failures := 1; ; failures++ {
		d, ok := s.Backoff(failures)
		if !ok {
			if err == nil {
				err = errGaveUp
			}
			return err
		}
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err = op(ctx); err == nil {
			return nil
		}
	}
}

var errGaveUp = errors.New("backend: the retry strategy gave up before a retry")
