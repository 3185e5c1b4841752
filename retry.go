package distlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// RetryStrategy decides whether and when to try again after a transient
// failure (an error matching ErrUnavailable). Implementations must be safe
// for concurrent use; the ones in this package are.
type RetryStrategy interface {
	// Backoff returns the pause before the next attempt, given the number of
	// failed attempts so far (1 after the first failure), and false to stop.
	Backoff(failures int) (time.Duration, bool)
}

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
var NoRetry RetryStrategy = noRetry{}

type noRetry struct{}

func (noRetry) Backoff(int) (time.Duration, bool) { return 0, false }

// ExponentialBackoff waits a random time between 0 and min(max, base*2^(n-1))
// after the n-th failure ("full jitter"), so that clients that failed
// together do not retry together. It never gives up by itself; combine it
// with Limit or a context deadline.
func ExponentialBackoff(base, max time.Duration) RetryStrategy {
	return exponential{base: max1(base), max: max1(max)}
}

type exponential struct{ base, max time.Duration }

func (e exponential) Backoff(n int) (time.Duration, bool) {
	d := e.max
	if n <= 1 {
		d = min(e.base, e.max)
	} else if n < 63 {
		if s := e.base << (n - 1); s > 0 && s < e.max && s>>(n-1) == e.base {
			d = s
		}
	}
	return rand.N(d) + 1, true
}

// Limit stops s after n retries.
func Limit(s RetryStrategy, n int) RetryStrategy { return limit{s: s, n: n} }

type limit struct {
	s RetryStrategy
	n int
}

func (l limit) Backoff(failures int) (time.Duration, bool) {
	if failures > l.n {
		return 0, false
	}
	return l.s.Backoff(failures)
}

func max1(d time.Duration) time.Duration {
	if d <= 0 {
		return 1
	}
	return d
}

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
