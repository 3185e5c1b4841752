package distlock

import (
	"context"
	"errors"
	"time"

	"github.com/distlock/distlock/driver"
)

// RetryStrategy decides whether and when to try again after a transient
// failure (an error matching ErrUnavailable). Implementations must be safe
// for concurrent use; the ones in this package are.
type RetryStrategy = driver.RetryStrategy

// Default retry parameters: exponential backoff with full jitter from
// DefaultRetryBase up to DefaultRetryCap, at most DefaultRetryLimit retries.
const (
	DefaultRetryBase  = 10 * time.Millisecond
	DefaultRetryCap   = time.Second
	DefaultRetryLimit = 8
)

// DefaultRetry is the strategy a Client uses unless told otherwise.
var DefaultRetry = Limit(ExponentialBackoff(DefaultRetryBase, DefaultRetryCap), DefaultRetryLimit)

// NoRetry never retries.
var NoRetry = driver.NoRetry

// ExponentialBackoff waits a random time between 0 and min(max, base*2^(n-1))
// after the n-th failure ("full jitter"), so that clients that failed
// together do not retry together. It never gives up by itself; combine it
// with Limit or a context deadline.
func ExponentialBackoff(base, max time.Duration) RetryStrategy {
	return driver.ExponentialBackoff(base, max)
}

// Limit stops s after n retries.
func Limit(s RetryStrategy, n int) RetryStrategy { return driver.Limit(s, n) }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retry runs op until it succeeds, fails permanently (an error not matching
// ErrUnavailable), s gives up, or ctx ends.
func retry(ctx context.Context, s RetryStrategy, op func() error) error {
	for failures := 1; ; failures++ {
		err := op()
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		d, ok := s.Backoff(failures)
		if !ok || sleep(ctx, d) != nil {
			return err
		}
	}
}
