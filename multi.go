package distlock

import (
	"context"
	"errors"
	"slices"
	"time"
)

// AcquireAll acquires every key, all or nothing, and returns them as one
// LockSet. Keys are de-duplicated and taken in sorted order, so two callers
// asking for the same keys in different orders cannot deadlock each other.
// ctx bounds the whole acquisition. On failure the keys already taken are
// released and the error says which key failed.
//
// The sorted order protects only against other AcquireAll calls and single
// Acquires: a caller that already holds a key and then asks for a smaller
// one can still deadlock with someone doing the opposite.
func (c *Client) AcquireAll(ctx context.Context, keys []string, opts ...Option) (*LockSet, error) {
	cfg, err := c.cfg.with(opts)
	if err != nil {
		return nil, err
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	if len(sorted) == 0 {
		return nil, keyErr("acquire", "", ErrInvalidKey)
	}
	for _, k := range sorted {
		if err := ValidateKey(k); err != nil {
			return nil, keyErr("acquire", k, err)
		}
	}
	s := &LockSet{locks: make([]*Lock, 0, len(sorted))}
	parent := ctx
	for _, k := range sorted {
		// Each lock is acquired under the previous one, so the last lock's
		// context ends when any of them ends.
		l, err := c.acquire(ctx, parent, k, cfg)
		if err != nil {
			return nil, errors.Join(err, s.Release(context.WithoutCancel(ctx)))
		}
		s.locks = append(s.locks, l)
		if !ctxHolds(parent, l.h) { // a key parent held keeps parent's chain
			parent = l.Context()
		}
	}
	s.bind(ctx)
	return s, nil
}

// bind gives the set its own context, ending with any of its locks. The
// last lock's context would not do: a key that ctx already held is
// reentered, and that lock was not acquired under the others.
func (s *LockSet) bind(ctx context.Context) {
	sh := &hold{idx: -1}
	sh.setLimitsLocked(time.Time{}, time.Time{}) // none: it ends with its enders
	next := nearestHeld(ctx)
	for _, l := range s.locks {
		sh.parts = append(sh.parts, l.h)
		next = &heldNode{c: l.h.c, key: l.h.key, h: l.h, scope: sh, next: next}
	}
	sh.ctx, sh.cancel = context.WithCancelCause(context.WithValue(context.WithoutCancel(ctx), heldKey{}, next))
	s.h = sh
	if n := nearestHeld(ctx); n != nil {
		sh.parent = n.scope // the set also ends with the lock ctx came from
	}
	for _, p := range sh.enders() {
		p.adopt(sh) // cancels sh at once if p has already ended
	}
}

// A LockSet is a group of locks acquired together by AcquireAll. It is lost
// when any of its locks is lost. Its methods are safe for concurrent use.
type LockSet struct {
	locks []*Lock // sorted by key
	h     *hold   // the set's context, with the locks' holds as parts
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
func (s *LockSet) Context() context.Context { return s.h.ctx }

// Done returns a channel closed when the set's context ends.
func (s *LockSet) Done() <-chan struct{} { return s.h.ctx.Done() }

// Err returns nil while every lock is held, and otherwise why the set
// ended. Like Lock.Err it is exact when called, before the set's context
// has been cancelled.
func (s *LockSet) Err() error {
	if s.h.ctx.Err() != nil {
		return context.Cause(s.h.ctx)
	}
	return s.h.errChain(time.Since(epoch).Nanoseconds())
}

// Release ends the set's context, then releases every lock of the set, the
// last acquired first, and returns their joined errors.
func (s *LockSet) Release(ctx context.Context) error {
	if sh := s.h; sh != nil { // nil while AcquireAll gives up
		sh.over.CompareAndSwap(nil, &errReleased)
		sh.cancelTree(ErrReleased) // which also takes sh out of its enders' kids
	}
	var errs []error
	for _, l := range slices.Backward(s.locks) {
		errs = append(errs, l.Release(ctx))
	}
	return errors.Join(errs...)
}

var errReleased error = ErrReleased
