package distlock

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Defaults of the options. Each option's comment repeats its default.
const (
	DefaultTTL           = 15 * time.Second
	DefaultDrift         = 0.01
	DefaultSafetyMargin  = 10 * time.Millisecond
	DefaultMaxDepth      = 32
	MaxTTL               = 24 * time.Hour
	maxDrift             = 0.5
	minRenewInterval     = time.Millisecond
	defaultRenewFraction = 3 // renew every TTL/3
)

// Option configures a Client (given to New) or one acquisition (given to
// Acquire, TryAcquire, Do or AcquireAll, where it overrides the Client's
// setting for that lock). WithLogger and WithOwner apply to a Client only:
// an acquisition given one fails with ErrInvalidOption.
type Option func(*config)

type config struct {
	ttl        time.Duration
	wait       bool
	retry      RetryStrategy
	renewEvery time.Duration // 0: TTL/3
	noRenew    bool
	maxHold    time.Duration
	drift      float64
	margin     time.Duration
	maxDepth   int
	atRisk     time.Duration // 0: the default window
	owner      string
	logger     *slog.Logger
	meters     metric.MeterProvider // nil: the global provider
	keyLabel   func(key string) string
	clientOnly string // the last Client-only option applied, by name
}

func defaultConfig() config {
	host, _ := os.Hostname()
	return config{
		ttl:      DefaultTTL,
		wait:     true,
		retry:    DefaultRetry,
		drift:    DefaultDrift,
		margin:   DefaultSafetyMargin,
		maxDepth: DefaultMaxDepth,
		owner:    fmt.Sprintf("%s:%d", host, os.Getpid()),
		logger:   slog.New(slog.DiscardHandler),
	}
}

// WithTTL sets the lease duration: how long the service keeps a grant whose
// holder stopped renewing. It bounds how long a crashed holder blocks others.
// Default: DefaultTTL (15s). It must be positive and at most MaxTTL (24h).
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithWait selects whether Acquire waits for a held key (true) or tries once
// (false). Default: true. TryAcquire is Acquire with WithWait(false).
func WithWait(wait bool) Option { return func(c *config) { c.wait = wait } }

// WithRetry sets how transient backend errors (ErrUnavailable) are retried
// while acquiring and releasing. Default: DefaultRetry (exponential backoff
// with full jitter, 10ms to 1s, 8 retries). Renewal does not use it: the
// watchdog keeps trying until the lock's deadline.
func WithRetry(s RetryStrategy) Option {
	return func(c *config) {
		if s == nil {
			s = NoRetry
		}
		c.retry = s
	}
}

// WithRenewEvery sets how often held locks are refreshed. Default: TTL/3.
// It must be at least 1ms and shorter than the lock's usable validity.
func WithRenewEvery(d time.Duration) Option {
	return func(c *config) { c.renewEvery, c.noRenew = d, false }
}

// WithoutRenewal turns automatic renewal off: the lock ends at its deadline
// unless the holder calls Lock.Refresh. Default: renewal is on.
func WithoutRenewal() Option { return func(c *config) { c.noRenew = true } }

// WithMaxHold bounds how long a lock may be held. When it passes, the lock's
// context is cancelled with ErrMaxHoldExceeded and the lock is released, so
// that a stuck holder cannot keep a key forever by renewing. Default: 0, no
// bound.
func WithMaxHold(d time.Duration) Option { return func(c *config) { c.maxHold = d } }

// WithDrift sets the fraction of the TTL assumed lost to clock-rate
// differences between this host and the service. The local deadline is
// sent + TTL*(1-drift) - margin. Default: DefaultDrift (0.01). It must be in
// [0, 0.5).
func WithDrift(f float64) Option { return func(c *config) { c.drift = f } }

// WithSafetyMargin sets a fixed time subtracted from every local deadline,
// covering timer latency in this process. Default: DefaultSafetyMargin
// (10ms). It must not be negative.
func WithSafetyMargin(d time.Duration) Option { return func(c *config) { c.margin = d } }

// WithMaxDepth limits reentrant acquisitions of one key through lock
// contexts. Default: DefaultMaxDepth (32). It must be at least 1; 1 turns
// reentrancy off (a reentrant acquire then fails with ErrTooDeep).
func WithMaxDepth(n int) Option { return func(c *config) { c.maxDepth = n } }

// WithOwner sets the description of this Client stored with its locks where
// the backend keeps one (see Lister). Default: "hostname:pid". Client only.
func WithOwner(owner string) Option {
	return func(c *config) { c.owner, c.clientOnly = owner, "WithOwner" }
}

// WithLogger sets where the Client logs: losses and renewal failures at
// Warn; acquisitions, renewals, releases and retried failures at Debug.
// Default: nothing is logged. Client only.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		c.logger, c.clientOnly = l, "WithLogger"
	}
}

// WithMeterProvider sets where the Client's metrics go (see the
// instruments listed in the package's metrics documentation). Default: the
// global provider (otel.GetMeterProvider), a no-op until the application
// installs one. Client only.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meters, c.clientOnly = mp, "WithMeterProvider" }
}

// WithKeyLabel adds to every measurement of a lock the attribute
// distlock.key.label, label(key). The label must take few values (the
// first segment of a key, say), or the metrics grow without bound; keys
// themselves are never attributes. Default: no label. Client only.
func WithKeyLabel(label func(key string) string) Option {
	return func(c *config) { c.keyLabel, c.clientOnly = label, "WithKeyLabel" }
}

// WithAtRiskWindow sets how close to its local deadline a lock whose
// renewals have not been confirmed in time is reported at risk (see
// Lock.AtRisk). Default: a third of the TTL, or less when the lease leaves
// less room: half the time between the next renewal and the deadline that
// the last confirmation set, so that a healthy lock is never at risk. The
// default is measured on the lease the service confirmed, which a session
// backend may make shorter than the TTL (a ZooKeeper session timeout);
// this option's window is not. It must be positive and shorter than the
// usable TTL.
func WithAtRiskWindow(d time.Duration) Option { return func(c *config) { c.atRisk = d } }

func (c config) with(opts []Option) (config, error) {
	if len(opts) == 0 {
		return c, c.validate() // (c would escape below: this costs no allocation)
	}
	return c.withOpts(opts)
}

func (c config) withOpts(opts []Option) (config, error) {
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c, c.validate()
}

// usable is the part of a TTL the holder can count on.
func (c config) usable(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*(1-c.drift)) - c.margin
}

func (c config) renewInterval() time.Duration {
	if c.renewEvery > 0 {
		return c.renewEvery
	}
	return c.ttl / defaultRenewFraction
}

func (c config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
	switch {
	case c.ttl <= 0:
		return bad("TTL %v is not positive", c.ttl)
	case c.ttl > MaxTTL:
		return bad("TTL %v is longer than %v", c.ttl, MaxTTL)
	case !(c.drift >= 0 && c.drift < maxDrift):
		return bad("drift %v is not in [0, %v)", c.drift, maxDrift)
	case c.margin < 0:
		return bad("safety margin %v is negative", c.margin)
	case c.usable(c.ttl) <= 0:
		return bad("TTL %v leaves no time after drift %v and margin %v", c.ttl, c.drift, c.margin)
	case c.renewEvery < 0:
		return bad("renewal interval %v is negative", c.renewEvery)
	case !c.noRenew && c.renewInterval() < minRenewInterval:
		return bad("renewal interval %v is shorter than %v", c.renewInterval(), minRenewInterval)
	case !c.noRenew && c.renewInterval() >= c.usable(c.ttl):
		return bad("renewal interval %v is not shorter than the usable TTL %v", c.renewInterval(), c.usable(c.ttl))
	case c.maxHold < 0:
		return bad("MaxHold %v is negative", c.maxHold)
	case c.maxDepth < 1:
		return bad("max depth %d is less than 1", c.maxDepth)
	case c.atRisk < 0 || c.atRisk >= c.usable(c.ttl):
		return bad("at-risk window %v is not in [0, the usable TTL %v)", c.atRisk, c.usable(c.ttl))
	}
	return nil
}
