package distlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// A Lock is a held grant of one key. Its methods are safe for concurrent
// use. A Lock must not be copied.
//
// What a Lock promises: while its context is not done, the service has
// confirmed the grant recently enough that, with the clock drift and safety
// margin allowed for, no other client can have been granted the key. What it
// cannot promise: that this process is not paused between checking and
// acting. Pass Token to the storage and let it refuse stale writers (see
// package fence).
type Lock struct {
	h        *hold
	released atomic.Bool
}

// Key returns the locked key.
func (l *Lock) Key() string { return l.h.key }

// Token returns the fencing token of the grant: strictly greater than the
// token of every earlier grant of this key. Reentrant handles share it.
func (l *Lock) Token() uint64 { return l.h.token }

// Context returns a context that is cancelled when the lock is lost or
// released, or when a lock it was acquired under ends. context.Cause of it
// is the reason, as Err reports.
func (l *Lock) Context() context.Context { return l.h.ctx }

// Done returns a channel that is closed when the lock's context ends.
func (l *Lock) Done() <-chan struct{} { return l.h.ctx.Done() }

// Err returns nil while the lock's context is live; afterwards the reason it
// ended: an error matching ErrLockLost, ErrReleased, or the reason of an
// enclosing lock.
func (l *Lock) Err() error {
	if l.h.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.h.ctx)
}

// Deadline returns the local time at which the lock's context will be
// cancelled unless a refresh is confirmed first; time.Until of it is the
// time left. ok is false when the grant has no time bound (it ends only when
// the service reports it lost) or the lock has ended.
func (l *Lock) Deadline() (deadline time.Time, ok bool) {
	c := l.h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.h.ended || l.h.deadline.IsZero() {
		return time.Time{}, false
	}
	return l.h.deadline, true
}

// Refresh extends the lease now, without waiting for the watchdog. It returns
// an error matching ErrLockLost if the lock was lost (and then the lock ends)
// and ErrNotHeld after Release.
func (l *Lock) Refresh(ctx context.Context) error {
	h := l.h
	if l.released.Load() {
		return keyErr("refresh", h.key, fmt.Errorf("%w: released", ErrNotHeld))
	}
	c := h.c
	c.mu.Lock()
	ended, cause := h.ended, h.cause
	c.mu.Unlock()
	if ended {
		if cause == ErrReleased {
			cause = fmt.Errorf("%w: released", ErrNotHeld)
		}
		return keyErr("refresh", h.key, cause)
	}
	v, err := h.lease.Refresh(ctx, h.cfg.ttl)
	c.refreshed(h, v, err, false)
	return keyErr("refresh", h.key, err)
}

// Release gives up this handle. When it is the last handle on the grant
// (reentrant acquisitions each return one), the lock's context is cancelled
// and the lease is returned to the service. Releasing a lock that had been
// lost returns an error matching ErrLockLost; releasing a handle twice
// returns ErrNotHeld.
//
// If ctx is done, or is the lock's own context, the release uses a fresh
// context bounded by the TTL so that the lease is not left behind.
func (l *Lock) Release(ctx context.Context) error {
	if !l.released.CompareAndSwap(false, true) {
		return keyErr("release", l.h.key, fmt.Errorf("%w: released twice", ErrNotHeld))
	}
	return keyErr("release", l.h.key, l.h.c.releaseHold(ctx, l.h, false))
}

// hold is the state shared by the handles of one grant.
type hold struct {
	c     *Client
	key   string
	cfg   config
	lease Lease
	token uint64
	since time.Time

	ctx       context.Context
	cancel    context.CancelCauseFunc
	stopOuter func() bool // detaches from the enclosing lock's context

	// Guarded by c.mu.
	started   bool
	lostEarly error // loss reported before the grant was started
	count     int   // live handles
	ended     bool  // lost or released: the context is (being) cancelled
	cause     error // why it ended
	deadline  time.Time
	maxHoldAt time.Time
	nextRenew time.Time
	inflight  bool // a refresh is under way
	when      time.Time
	idx       int // position in c.heap, -1 when absent

	relOnce sync.Once
	relErr  error
}

// onLost is the AcquireOptions.OnLost callback of this grant.
func (h *hold) onLost(err error) {
	c := h.c
	c.mu.Lock()
	if !h.started {
		if h.lostEarly == nil {
			h.lostEarly = err
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.end(h, err, false)
}

// releaseLease returns the lease to the service once, retrying transient
// failures.
func (h *hold) releaseLease(ctx context.Context) error {
	h.relOnce.Do(func() {
		h.relErr = retry(ctx, h.cfg.retry, func() error { return h.lease.Release(ctx) })
	})
	return h.relErr
}

// heldKey is the context key under which lock contexts record their locks.
type heldKey struct{}

// heldNode links the locks a context was derived from, innermost first.
type heldNode struct {
	c    *Client
	key  string
	h    *hold
	next *heldNode
}

func nearestHeld(ctx context.Context) *heldNode {
	n, _ := ctx.Value(heldKey{}).(*heldNode)
	return n
}

// findHeld returns the node of c's lock on key among ctx's locks.
func findHeld(ctx context.Context, c *Client, key string) *heldNode {
	for n := nearestHeld(ctx); n != nil; n = n.next {
		if n.c == c && n.key == key {
			return n
		}
	}
	return nil
}

// ctxHolds reports whether ctx was derived from h's context.
func ctxHolds(ctx context.Context, h *hold) bool {
	for n := nearestHeld(ctx); n != nil; n = n.next {
		if n.h == h {
			return true
		}
	}
	return false
}
