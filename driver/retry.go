package driver

import (
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
