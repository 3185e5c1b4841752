package distlock

import (
	"context"
	"errors"
	"slices"
)

// AcquireAll acquires every key, all or nothing, and returns them as one
// LockSet. Keys are de-duplicated and taken in sorted order, so two callers
// asking for the same keys in different orders cannot deadlock each other.
// ctx bounds the whole acquisition. On failure the keys already taken are
// released, and the error (a *KeyError) names the key that failed.
//
// Each key is acquired as Acquire would under ctx: a key that ctx already
// holds is reentered (a lock; a permit never is: see WithSemaphore), and
// every lock's context ends with ctx's lock, if any, and with its own
// grant, not with the other parts. The set's own context ends when any
// part ends (its Err then names the part), when the lock ctx came from
// ends, or when the set is released.
//
// The sorted order protects only against other AcquireAll calls and single
// Acquires: a caller that already holds a key and then asks for a smaller
// one can still deadlock with someone doing the opposite.
func (c *Client) AcquireAll(ctx context.Context, keys []string, opts ...LockOption) (*LockSet, error) {
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	first := ""
	if len(sorted) > 0 {
		first = sorted[0]
	}
	cfg, err := c.lockConfig(opts)
	if err != nil {
		return nil, keyErr("acquire", first, err)
	}
	if len(sorted) == 0 {
		return nil, keyErr("acquire", "", ErrInvalidKey)
	}
	for _, k := range sorted {
		if err := ValidateKey(k); err != nil {
			return nil, keyErr("acquire", k, err)
		}
	}
	s := &LockSet{locks: make([]*Lock, 0, len(sorted))}
	for _, k := range sorted {
		l, err := c.acquire(ctx, ctx, k, cfg)
		if err != nil {
			// A done ctx gets a fresh one, bounded by the TTL, in release.
			if rerr := s.releaseLocks(ctx); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return nil, keyErr("acquire", k, err)
		}
		s.locks = append(s.locks, l)
	}
	s.bind(ctx)
	return s, nil
}

// bind gives the set its scope: a context that ends with any of its parts
// and with the scope ctx came from, and that carries every part for
// reentrant acquisition.
func (s *LockSet) bind(ctx context.Context) {
	next := nearestHeld(ctx)
	parts := make([]*grant, len(s.locks))
	for i, l := range s.locks {
		parts[i] = l.g
		next = &heldNode{c: l.g.c, key: l.g.key, g: l.g, next: next}
	}
	sc := newScope(ctx, next)
	sc.parts, sc.locks = parts, s.locks
	for _, l := range s.locks {
		l.set = sc
	}
	for n := next; n != nil && n.scope == nil; n = n.next {
		n.scope = sc
	}
	s.scope = sc
	for _, e := range sc.enders() {
		e.adopt(sc) // ends sc at once if e has already ended
	}
}

// A LockSet is a group of locks acquired together by AcquireAll. It is lost
// when any of its locks is lost. Its methods are safe for concurrent use.
type LockSet struct {
	locks []*Lock // sorted by key
	scope *scope
}

// Locks returns the locks, sorted by key.
func (s *LockSet) Locks() []*Lock { return slices.Clone(s.locks) }

// Lock returns the lock on key, or nil if the set has none.
func (s *LockSet) Lock(key string) *Lock {
	i, ok := slices.BinarySearchFunc(s.locks, key, func(l *Lock, k string) int {
		switch {
		case l.Key() < k:
			return -1
		case l.Key() > k:
			return 1
		}
		return 0
	})
	if !ok {
		return nil
	}
	return s.locks[i]
}

// Context returns a context that ends when any lock of the set ends, when
// a lock that AcquireAll's context came from ends, or when the set is
// released. It carries every lock of the set, for reentrant acquisition;
// locks acquired under it end with the set.
func (s *LockSet) Context() context.Context { return s.scope.context() }

// Done returns a channel closed when the set's context ends.
func (s *LockSet) Done() <-chan struct{} { return s.scope.context().Done() }

// Err returns nil while every lock is held and the set's context has not
// ended, and otherwise why: ErrReleased once the set was released; a
// *KeyError with Op "hold" naming the first part (in key order) that ended,
// wrapping why (an error matching ErrLockLost, or ErrReleased for a part
// released on its own); or an *EnclosingError when the lock AcquireAll's
// context came from ended. Like Lock.Err it is exact when called, before
// the set's context has been cancelled.
func (s *LockSet) Err() error { return s.scope.why(nowNanos()) }

// Release ends the set's context, then releases every lock of the set, the
// last acquired first, and returns their joined errors.
func (s *LockSet) Release(ctx context.Context) error {
	s.scope.freed.Store(true)
	s.scope.end(ErrReleased)
	return s.releaseLocks(ctx)
}

func (s *LockSet) releaseLocks(ctx context.Context) error {
	var errs []error
	for _, l := range slices.Backward(s.locks) {
		errs = append(errs, l.Release(ctx))
	}
	return errors.Join(errs...)
}
