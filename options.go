package distlock

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/distlock/distlock/driver"
	"go.opentelemetry.io/otel/metric"
)

// Defaults of the options. Each option's comment repeats its default.
const (
	DefaultTTL           = 15 * time.Second
	DefaultDrift         = 0.01
	DefaultSafetyMargin  = 10 * time.Millisecond
	DefaultMaxDepth      = 32
	MaxTTL               = driver.MaxTTL
	MaxOwnerLen          = driver.MaxOwnerLen
	maxDrift             = 0.5
	minRenewInterval     = time.Millisecond
	defaultRenewFraction = 3 // renew every TTL/3
)

// Option configures a Client: New takes Options. Every LockOption is an
// Option too: given to New, it sets the Client's default for every lock it
// acquires. The options that concern the Client as a whole (WithOwner,
// WithLogger, WithMeterProvider, WithKeyLabel) are Options and not
// LockOptions, so that an acquisition given one does not compile.
type Option interface {
	applyToClient(c *config)
}

// LockOption configures one acquisition: Acquire, TryAcquire, Do and
// AcquireAll take LockOptions, which override the Client's setting for
// that lock. Given to New, a LockOption sets the Client's default.
type LockOption func(*config)

func (o LockOption) applyToClient(c *config) {
	if o != nil { // a nil LockOption in an Option is not a nil Option
		o(c)
	}
}

// clientOption is an Option that only a Client takes.
type clientOption func(*config)

func (o clientOption) applyToClient(c *config) {
	if o != nil {
		o(c)
	}
}

type config struct {
	ttl        time.Duration
	wait       bool
	retry      RetryStrategy
	renewEvery time.Duration // 0: TTL/3; NoRenewal: off
	maxHold    time.Duration
	drift      float64
	margin     time.Duration
	maxDepth   int
	atRisk     time.Duration // 0: the default window
	owner      string
	election   string
	permit     bool // WithSemaphore: a permit of semaphore, not a lock
	semaphore  driver.Semaphore
	shared     bool // WithShared: a shared (read) lock
	writer     bool // WithWriter: the writer of a read/write lock
	logger     *slog.Logger
	meters     metric.MeterProvider // nil: the global provider
	keyLabel   func(key string) string
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
func WithTTL(ttl time.Duration) LockOption { return func(c *config) { c.ttl = ttl } }

// WithWait selects whether Acquire waits for a held key (true) or tries once
// (false). Default: true. TryAcquire is Acquire with WithWait(false).
func WithWait(wait bool) LockOption { return func(c *config) { c.wait = wait } }

// WithRetry sets how transient backend errors (ErrUnavailable) are retried
// while acquiring and releasing. Default: DefaultRetry (exponential backoff
// with full jitter, 10ms to 1s, 8 retries). Renewal does not use it: the
// watchdog keeps trying until the lock's deadline.
func WithRetry(s RetryStrategy) LockOption {
	return func(c *config) {
		if s == nil {
			s = NoRetry
		}
		c.retry = s
	}
}

// NoRenewal, given to WithRenewal, turns automatic renewal off.
const NoRenewal time.Duration = -1

// WithRenewal sets how often held locks are refreshed: every d, or never
// with NoRenewal (the lock then ends at its deadline unless its holder calls
// Lock.Refresh; a test of fencing uses it to let a lease lapse). 0 asks for
// the default. Default: TTL/3. Any other d must be at least 1ms and shorter
// than the lock's usable validity.
func WithRenewal(d time.Duration) LockOption { return func(c *config) { c.renewEvery = d } }

// WithMaxHold bounds how long a lock may be held. When it passes, the lock's
// context is cancelled with ErrMaxHoldExceeded and the lock is released, so
// that a stuck holder cannot keep a key forever by renewing. Default: 0, no
// bound.
func WithMaxHold(d time.Duration) LockOption { return func(c *config) { c.maxHold = d } }

// WithDrift sets the fraction of the TTL assumed lost to clock-rate
// differences between this host and the service. The local deadline is
// sent + TTL*(1-drift) - margin. Default: DefaultDrift (0.01). It must be in
// [0, 0.5).
func WithDrift(f float64) LockOption { return func(c *config) { c.drift = f } }

// WithSafetyMargin sets a fixed time subtracted from every local deadline,
// covering timer latency in this process. Default: DefaultSafetyMargin
// (10ms). It must not be negative.
func WithSafetyMargin(d time.Duration) LockOption { return func(c *config) { c.margin = d } }

// WithMaxDepth limits reentrant acquisitions of one key through lock
// contexts. Default: DefaultMaxDepth (32). It must be at least 1; 1 turns
// reentrancy off (a reentrant acquire then fails with ErrTooDeep).
func WithMaxDepth(n int) LockOption { return func(c *config) { c.maxDepth = n } }

// WithOwner sets the description of this Client stored with its locks where
// the backend keeps one (see Client.Holder). Default: "hostname:pid". It
// must be valid UTF-8 of at most MaxOwnerLen bytes. WithLockOwner
// overrides it for one acquisition.
func WithOwner(owner string) Option {
	return clientOption(func(c *config) { c.owner = owner })
}

// WithLockOwner sets the description stored with this one lock, in place
// of the Client's (WithOwner), where the backend keeps one: what
// Client.Holder, Client.Watch and the holder listing report for the grant,
// and what Lock.SetOwner changes. An election stores its candidate's value
// so. Default: the Client's owner. It must be valid UTF-8 of at most
// MaxOwnerLen bytes.
func WithLockOwner(owner string) LockOption { return func(c *config) { c.owner = owner } }

// WithElection makes the lock a candidacy in the election named name,
// as package election's terms are: a backend whose service has an
// election layout of its own (etcd's) keeps it there, where the service's
// other clients see it, and any other backend takes the key as a lock
// (see driver.AcquireOptions.Election). The key must be the election's
// lock key, and the owner (WithLockOwner) is the candidate's value. Use
// package election rather than this option. Default: none, a lock.
func WithElection(name string) LockOption { return func(c *config) { c.election = name } }

// Semaphore describes the counting semaphore a permit is asked of
// (WithSemaphore): its limit, and whether permits name their slots.
type Semaphore = driver.Semaphore

// WithSemaphore makes the acquisition one of s.Limit permits of the
// semaphore kept at the key, on a backend that grants permits
// (driver.Semaphores; any other refuses it with an error matching
// errors.ErrUnsupported). The permit is a Lock in every other way: its
// own token, renewal, loss and release. It never re-enters: acquired
// under a permit's context, it is another permit. A limit outside
// [1, driver.MaxPermits], and WithElection with it, are refused with
// ErrInvalidOption; Slots, by a backend whose permits cannot name their
// slot (driver.SlotLease), with errors.ErrUnsupported. Use package
// semaphore rather than this option. It is refused with ErrInvalidOption
// given to New. Default: none, a lock.
func WithSemaphore(s Semaphore) LockOption {
	return func(c *config) { c.permit, c.semaphore = true, s }
}

// WithShared makes the acquisition a shared (read) lock of the key, on a
// backend that grants them (driver.SharedLocks; any other refuses it with
// an error matching errors.ErrUnsupported). It shares the key with the
// key's other shared locks, and excludes (and is excluded by) the key's
// ordinary, exclusive locks: a lock of the key is its writer. Askers are
// served in arrival order, and a writer waiting for the key blocks the
// readers who come after it. The lock is a Lock in every other way: its
// own token (unique and above every earlier grant's of the key), renewal,
// loss and release.
//
// Acquired under the context of a lock of the same key, it re-enters that
// lock, shared or exclusive; an exclusive lock asked under a shared
// lock's context of the same key is refused with ErrUpgrade, since it
// would wait for itself. WithSemaphore, WithElection and WithWriter with
// it are refused with ErrInvalidOption, and so is WithShared given to New.
// A read lock asked again from a context that does not carry the first
// (another goroutine's, context.Background) is another read lock, which
// waits behind a waiting writer: the writer waits for the first, and the
// holder for the writer. Package rwlock names these locks. Default:
// false, an exclusive lock.
func WithShared(shared bool) LockOption { return func(c *config) { c.shared = shared } }

// WithWriter marks an exclusive lock as the writer of a read/write lock.
// It excludes as every lock does; it matters only where the service has
// a read/write layout of its own, whose readers see only its writers
// (ZooKeeper's, from Curator's InterProcessReadWriteLock: see package
// zklock). Package rwlock's write locks use it. It is refused with
// ErrInvalidOption given to New. Default: false.
func WithWriter(writer bool) LockOption { return func(c *config) { c.writer = writer } }

// WithLogger sets where the Client logs: losses and renewal failures at
// Warn; acquisitions, renewals, releases and retried failures at Debug.
// Default: nothing is logged.
func WithLogger(l *slog.Logger) Option {
	return clientOption(func(c *config) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		c.logger = l
	})
}

// WithMeterProvider sets where the Client's metrics go (the instruments
// are listed under Metrics in the package documentation). Default: the
// global provider (otel.GetMeterProvider), a no-op until the application
// installs one; install it before New, or the counters' zero series (see
// Metrics) are not seen.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return clientOption(func(c *config) { c.meters = mp })
}

// WithKeyLabel adds to every measurement of a lock the attribute
// distlock.key.label, label(key). The label must take few values (the
// first segment of a key, say), or the metrics grow without bound; keys
// themselves are never attributes. Default: no label.
func WithKeyLabel(label func(key string) string) Option {
	return clientOption(func(c *config) { c.keyLabel = label })
}

// WithAtRiskWindow sets how close to its local deadline a lock whose
// renewals have not been confirmed in time is reported at risk (see
// Lock.AtRisk). Default: a third of the TTL, or less when the lease leaves
// less room: half the time between the next renewal and the deadline that
// the last confirmation set, so that a healthy lock is never at risk. The
// default is measured on the lease the service confirmed, which a session
// backend may make shorter than the TTL (5/12 of a ZooKeeper session
// timeout);
// this option's window is not. It must be positive and shorter than the
// usable TTL.
func WithAtRiskWindow(d time.Duration) LockOption { return func(c *config) { c.atRisk = d } }

// with is c with a Client's options.
func (c config) with(opts []Option) (config, error) {
	for _, o := range opts {
		if o != nil {
			o.applyToClient(&c)
		}
	}
	return c, c.validate()
}

// withLock is c with one acquisition's options.
func (c config) withLock(opts []LockOption) (config, error) {
	if len(opts) == 0 {
		return c, c.validate() // see TestCycleAllocs
	}
	return c.withLockOpts(opts)
}

func (c config) withLockOpts(opts []LockOption) (config, error) {
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

// renews reports whether held locks are renewed automatically.
func (c config) renews() bool { return c.renewEvery != NoRenewal }

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
	case c.renewEvery < 0 && c.renewEvery != NoRenewal:
		return bad("renewal interval %v is negative", c.renewEvery)
	case c.renews() && c.renewInterval() < minRenewInterval:
		return bad("renewal interval %v is shorter than %v", c.renewInterval(), minRenewInterval)
	case c.renews() && c.renewInterval() >= c.usable(c.ttl):
		return bad("renewal interval %v is not shorter than the usable TTL %v", c.renewInterval(), c.usable(c.ttl))
	case c.maxHold < 0:
		return bad("MaxHold %v is negative", c.maxHold)
	case c.maxDepth < 1:
		return bad("max depth %d is less than 1", c.maxDepth)
	case c.atRisk < 0 || c.atRisk >= c.usable(c.ttl):
		return bad("at-risk window %v is not in [0, the usable TTL %v)", c.atRisk, c.usable(c.ttl))
	case c.permit && (c.semaphore.Limit < 1 || c.semaphore.Limit > driver.MaxPermits):
		return bad("semaphore limit %d is not in [1, %d]", c.semaphore.Limit, driver.MaxPermits)
	case c.permit && c.election != "":
		return bad("a permit cannot be a candidacy (WithSemaphore with WithElection)")
	case c.shared && c.permit:
		return bad("a permit cannot be a shared lock (WithSemaphore with WithShared)")
	case c.shared && c.election != "":
		return bad("a candidacy cannot be a shared lock (WithElection with WithShared)")
	case c.shared && c.writer:
		return bad("a shared lock cannot be a writer (WithShared with WithWriter)")
	}
	return driver.CheckOwner(c.owner)
}
