package redlock

// The options of New, their defaults, and their validation.

import (
	"fmt"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

const (
	// DefaultRequestTimeoutDivisor sets the default per-node timeout of
	// every request for a lease: the lease's TTL divided by it (a tenth),
	// unless WithRequestTimeout fixes it.
	DefaultRequestTimeoutDivisor = 10

	// defaultListTimeout bounds each node's part of a listing, which is for no
	// lease, unless WithRequestTimeout fixes it.
	defaultListTimeout = 5 * time.Second

	// DefaultMaxTTL is the longest lease TTL a Backend accepts, unless set
	// with WithMaxTTL. It is also how long a node that lost its data waits
	// before it votes again.
	DefaultMaxTTL = 5 * time.Minute

	// driftFactor and driftFixed are the clock drift allowed for in the
	// validity of a grant: TTL/100 + 2ms.
	driftFactor = 0.01
	driftFixed  = 2 * time.Millisecond
)

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix         string
	requestTimeout time.Duration // unless fixedTimeout: TTL / DefaultRequestTimeoutDivisor
	fixedTimeout   bool
	maxTTL         time.Duration
}

// WithPrefix sets the prefix of every Redis key and pub/sub channel the
// Backend uses on its nodes. Default: DefaultPrefix ("redlock:"). It must
// not contain '{' or '}'. Backends sharing locks must use the same prefix.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithRequestTimeout fixes how long every request waits for each node's
// reply. Default: the TTL of the lease divided by
// DefaultRequestTimeoutDivisor (a tenth), so that a node that does not
// answer costs a small part of the validity; 5s for each node's part of a
// listing. It must be positive.
//
// A timeout beyond a second waits for slower replies, but a reply that
// comes a second or more after its round's first request does not count
// toward the grant's token, which needs the replies of a majority of the
// nodes within a second of one round's first request (see Fencing in the
// package documentation): such a node votes, but a try that fewer than a
// majority answered in time fails, with an error matching
// distlock.ErrUnavailable. The default exceeds a second for TTLs over
// 10s.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) { c.requestTimeout, c.fixedTimeout = d, true }
}

// WithMaxTTL sets the longest lease TTL that Acquire and Refresh accept
// (longer ones get an error matching distlock.ErrInvalidOption), and so how
// long a node that lost its data waits before it votes again (see
// Durability in the package documentation). Default: DefaultMaxTTL (5m).
// Every Backend of a deployment must use the same value or a smaller one.
func WithMaxTTL(d time.Duration) Option { return func(c *config) { c.maxTTL = d } }

func newConfig(opts []Option) (config, error) {
	c := config{prefix: DefaultPrefix, maxTTL: DefaultMaxTTL}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: redlock: "+format, append([]any{driver.ErrInvalidOption}, args...)...)
	}
	switch {
	case strings.ContainsAny(c.prefix, "{}"):
		return c, bad("prefix %q contains a brace", c.prefix)
	case c.fixedTimeout && c.requestTimeout <= 0:
		return c, bad("request timeout %v is not positive", c.requestTimeout)
	case c.maxTTL <= 0 || c.maxTTL > driver.MaxTTL:
		return c, bad("max TTL %v is not in (0, %v]", c.maxTTL, driver.MaxTTL)
	}
	return c, nil
}

// timeoutFor is the per-node timeout of a request for a lease of ttl.
func (c config) timeoutFor(ttl time.Duration) time.Duration {
	if c.fixedTimeout {
		return c.requestTimeout
	}
	return max(ttl/DefaultRequestTimeoutDivisor, time.Millisecond)
}

// listTimeout is the per-node timeout of a listing.
func (c config) listTimeout() time.Duration {
	if c.fixedTimeout {
		return c.requestTimeout
	}
	return defaultListTimeout
}

// drift is the clock drift allowed for in a validity of ttl.
func drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*driftFactor) + driftFixed
}

// checkTTL is driver.CheckTTL with this Backend's maximum.
func (c config) checkTTL(ttl time.Duration) error {
	if ttl > c.maxTTL {
		return fmt.Errorf("%w: redlock: TTL %v exceeds the Backend's maximum %v (WithMaxTTL)", driver.ErrInvalidOption, ttl, c.maxTTL)
	}
	return nil
}
