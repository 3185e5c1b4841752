package semaphore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// KeyPrefix starts the key of every semaphore: the semaphore named NAME
// is kept at the key KeyPrefix+NAME (see the package documentation).
const KeyPrefix = "semaphore/"

// A Semaphore is one named counting semaphore over a Client: up to its
// limit of permits are held at once, by any number of processes using
// Semaphores of the same name and limit over Clients of the same service.
// A Semaphore holds no state of its own besides its name, limit and
// options; it is safe for concurrent use.
type Semaphore struct {
	c        *distlock.Client
	name     string
	key      string
	sem      distlock.Semaphore
	lockOpts []distlock.LockOption
}

// Option configures a Semaphore.
type Option func(*config)

type config struct {
	slots    bool
	lockOpts []distlock.LockOption
}

// WithSlots gives each permit a slot (Permit.Slot), an integer in
// [0, limit) that no other live permit of the semaphore has: the lowest
// free when the permit is granted. A permit's token is then greater than
// every earlier token of its slot, so that one fence per slot admits it.
// A backend whose permits cannot name a slot refuses them: Acquire fails
// with an error matching errors.ErrUnsupported. Default: permits have no
// slot.
func WithSlots() Option { return func(c *config) { c.slots = true } }

// WithLockOptions sets the options of the lease that each permit is (its
// TTL, renewal, drift, at-risk window, owner...), over the Client's
// defaults. WithSemaphore and WithWait are the Semaphore's own and are
// overridden: Acquire always waits and TryAcquire always tries once,
// whatever WithWait among opts says. Default: none.
func WithLockOptions(opts ...distlock.LockOption) Option {
	return func(c *config) { c.lockOpts = append(c.lockOpts, opts...) }
}

// New returns the semaphore named name over c, with limit permits. The
// name is any valid key (see distlock.ValidateKey) that leaves room for
// KeyPrefix; an error matching distlock.ErrInvalidKey reports one that
// does not, and distlock.ErrInvalidOption a nil Client or a limit outside
// [1, driver.MaxPermits]. The limit is stored with the semaphore by its
// first holder: Acquire refuses a permit while the stored limit differs.
func New(c *distlock.Client, name string, limit int, opts ...Option) (*Semaphore, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: semaphore: nil client", distlock.ErrInvalidOption)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: semaphore: empty name", distlock.ErrInvalidKey)
	}
	key := KeyPrefix + name
	if err := distlock.ValidateKey(key); err != nil {
		return nil, fmt.Errorf("semaphore: name: %w", err)
	}
	if limit < 1 || limit > driver.MaxPermits {
		return nil, fmt.Errorf("%w: semaphore: limit %d is not in [1, %d]", distlock.ErrInvalidOption, limit, driver.MaxPermits)
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return &Semaphore{c: c, name: name, key: key, sem: distlock.Semaphore{Limit: limit, Slots: cfg.slots},
		lockOpts: cfg.lockOpts}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Key returns the key the semaphore is kept at: KeyPrefix+Name.
func (s *Semaphore) Key() string { return s.key }

// Limit returns the number of permits the semaphore grants at once.
func (s *Semaphore) Limit() int { return s.sem.Limit }

// Acquire waits for a permit and returns it. Waiters are served in the
// order they started waiting, as the backend allows (see its package
// documentation, "Waiting").
//
// If ctx ends first, Acquire returns an error matching both
// distlock.ErrNotAcquired and ctx.Err(), and holds nothing: a permit
// granted as ctx ended is given back. A permit of a semaphore whose
// stored limit differs is refused with an error matching
// distlock.ErrInvalidOption (a *driver.LimitError), and a backend that
// cannot grant permits gives an error matching errors.ErrUnsupported.
func (s *Semaphore) Acquire(ctx context.Context) (*Permit, error) {
	return s.acquire(ctx, distlock.WithWait(true))
}

// TryAcquire is Acquire that tries once: when every permit is held, or
// others wait for one, it fails with an error matching
// distlock.ErrNotAcquired.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Permit, error) {
	return s.acquire(ctx, distlock.WithWait(false))
}

func (s *Semaphore) acquire(ctx context.Context, wait distlock.LockOption) (*Permit, error) {
	opts := make([]distlock.LockOption, 0, len(s.lockOpts)+2)
	opts = append(opts, s.lockOpts...)
	opts = append(opts, wait, distlock.WithSemaphore(s.sem))
	l, err := s.c.Acquire(ctx, s.key, opts...)
	if err != nil {
		return nil, fmt.Errorf("semaphore: acquire: %w", err)
	}
	if ctx.Err() != nil {
		// Granted as ctx ended: the caller gets an error, so no permit.
		l.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("semaphore: acquire: %w: %w", distlock.ErrNotAcquired, ctx.Err())
	}
	return &Permit{l: l}, nil
}

// Do acquires a permit, runs fn with a context that ends when the
// permit is lost or ctx ends, and releases the permit when fn returns (or
// panics), as distlock.Client.Do does with a lock: the returned error
// joins fn's error with the release's, which matches
// distlock.ErrLockLost if the permit was lost before fn returned.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error) (err error) {
	p, err := s.Acquire(ctx)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(p.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer func() {
		stop()
		cancel(nil)
		// A done ctx gets a fresh one, bounded by the TTL.
		if rerr := p.Release(ctx); err == nil {
			err = rerr
		} else if rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(fctx)
}

// Holders returns the live permits of the semaphore, sorted by token, as
// the service has them now, and the limit it stores (0 when nothing holds
// or awaits a permit, driver.UnknownLimit where the backend's layout
// stores none). A Holder's Slot is set, with HasSlot, under WithSlots.
func (s *Semaphore) Holders(ctx context.Context) (limit int, holders []distlock.Holder, err error) {
	st, err := s.c.Permits(ctx, s.key)
	if err != nil {
		return 0, nil, fmt.Errorf("semaphore: holders: %w", err)
	}
	return st.Limit, st.Holders, nil
}

// A Permit is one of a semaphore's permits, held until it is released or
// lost. It is a lease like a distlock.Lock, renewed by the Client; its
// methods are safe for concurrent use.
type Permit struct {
	l *distlock.Lock
}

// Token returns the permit's fencing token: unique, and greater than the
// token of every earlier grant on the semaphore's key.
func (p *Permit) Token() uint64 { return p.l.Token() }

// Slot returns the permit's slot, in [0, limit), with WithSlots; else -1.
func (p *Permit) Slot() int {
	if slot, ok := p.l.Slot(); ok {
		return slot
	}
	return -1
}

// Context returns a context that is cancelled when the permit is lost or
// released; context.Cause of it says why.
func (p *Permit) Context() context.Context { return p.l.Context() }

// Done returns a channel that is closed when the permit's context ends.
func (p *Permit) Done() <-chan struct{} { return p.l.Done() }

// Err returns nil while the permit is held, and otherwise why not, as
// distlock.Lock.Err does.
func (p *Permit) Err() error { return p.l.Err() }

// Deadline returns the local deadline of the permit, as
// distlock.Lock.Deadline does.
func (p *Permit) Deadline() (deadline time.Time, ok bool) { return p.l.Deadline() }

// Lock returns the lease the permit is, for what Permit does not offer
// (AtRisk, Refresh, SetOwner).
func (p *Permit) Lock() *distlock.Lock { return p.l }

// Release gives the permit back. It returns an error matching
// distlock.ErrLockLost if the permit had been lost, and one matching
// distlock.ErrNotHeld if it was released already, as distlock.Lock.Release
// does. If ctx is done, the release uses a fresh context bounded by the TTL.
func (p *Permit) Release(ctx context.Context) error { return p.l.Release(ctx) }
