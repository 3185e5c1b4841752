package rwlock

import (
	"context"
	"fmt"

	"github.com/distlock/distlock"
)

// A RWLock is one named read/write lock over a Client. It holds no state
// of its own besides its name and options; it is safe for concurrent use.
type RWLock struct {
	c        *distlock.Client
	name     string
	lockOpts []distlock.LockOption
}

// Option configures a RWLock.
type Option func(*config)

type config struct {
	lockOpts []distlock.LockOption
}

// WithLockOptions sets the options of each read and write lock (its TTL,
// renewal, drift, at-risk window, owner...), over the Client's defaults.
// WithShared, WithWriter and WithWait are the RWLock's own and are
// overridden. Default: none.
func WithLockOptions(opts ...distlock.LockOption) Option {
	return func(c *config) { c.lockOpts = append(c.lockOpts, opts...) }
}

// New returns the read/write lock named name over c: the key name itself
// (see the package documentation). An error matching
// distlock.ErrInvalidKey reports a name that is not a valid key, and
// distlock.ErrInvalidOption a nil Client.
func New(c *distlock.Client, name string, opts ...Option) (*RWLock, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: rwlock: nil client", distlock.ErrInvalidOption)
	}
	if err := distlock.ValidateKey(name); err != nil {
		return nil, fmt.Errorf("rwlock: name: %w", err)
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return &RWLock{c: c, name: name, lockOpts: cfg.lockOpts}, nil
}

// Name returns the lock's name, which is its key.
func (rw *RWLock) Name() string { return rw.name }

func (rw *RWLock) opts(shared, wait bool) []distlock.LockOption {
	opts := make([]distlock.LockOption, 0, len(rw.lockOpts)+3)
	opts = append(opts, rw.lockOpts...)
	return append(opts, distlock.WithShared(shared), distlock.WithWriter(!shared), distlock.WithWait(wait))
}

// RLock waits for a read lock and returns it. It is granted while no
// writer holds the lock and none waits before it. If ctx ends first it
// returns an error matching both distlock.ErrNotAcquired and ctx.Err(),
// and holds nothing; a backend that grants no shared locks gives an error
// matching errors.ErrUnsupported.
func (rw *RWLock) RLock(ctx context.Context) (*distlock.Lock, error) {
	return rw.c.Acquire(ctx, rw.name, rw.opts(true, true)...)
}

// TryRLock is RLock that tries once: while a writer holds the lock or
// waits for it, it fails with an error matching distlock.ErrNotAcquired.
func (rw *RWLock) TryRLock(ctx context.Context) (*distlock.Lock, error) {
	return rw.c.Acquire(ctx, rw.name, rw.opts(true, false)...)
}

// Lock waits for the write lock and returns it: granted when no reader or
// writer holds the lock and nobody waits before it. If ctx ends first it
// returns an error matching both distlock.ErrNotAcquired and ctx.Err(),
// and holds nothing. Under the context of a read lock of the same key it
// fails at once with distlock.ErrUpgrade.
func (rw *RWLock) Lock(ctx context.Context) (*distlock.Lock, error) {
	return rw.c.Acquire(ctx, rw.name, rw.opts(false, true)...)
}

// TryLock is Lock that tries once: while anyone holds the lock or waits
// for it, it fails with an error matching distlock.ErrNotAcquired.
func (rw *RWLock) TryLock(ctx context.Context) (*distlock.Lock, error) {
	return rw.c.Acquire(ctx, rw.name, rw.opts(false, false)...)
}

// RDo takes a read lock, runs fn with a context that ends when the lock
// is lost or ctx ends, and releases the lock when fn returns, as
// distlock.Client.Do does.
func (rw *RWLock) RDo(ctx context.Context, fn func(ctx context.Context) error) error {
	return rw.c.Do(ctx, rw.name, fn, rw.opts(true, true)...)
}

// Do takes the write lock, runs fn with a context that ends when the lock
// is lost or ctx ends, and releases the lock when fn returns, as
// distlock.Client.Do does.
func (rw *RWLock) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return rw.c.Do(ctx, rw.name, fn, rw.opts(false, true)...)
}

// Readers returns the live read locks, sorted by token, as the service
// has them now.
func (rw *RWLock) Readers(ctx context.Context) ([]distlock.Holder, error) {
	return rw.c.Readers(ctx, rw.name)
}

// Writer returns the holder of the write lock (or of any exclusive lock
// of the key), and held false when there is none.
func (rw *RWLock) Writer(ctx context.Context) (h distlock.Holder, held bool, err error) {
	return rw.c.Holder(ctx, rw.name)
}
