package distlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
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

// Err returns nil while the lock is held; afterwards the reason it ended:
// an error matching ErrLockLost, ErrReleased, or the reason of an enclosing
// lock. A reentrant handle that was released reports ErrReleased although
// the other handles still hold the grant (and the context, the grant's,
// lives on).
//
// Err is exact at the instant it is called, which the context cannot be:
// once the local deadline has passed it returns ErrDeadlinePassed, even if
// the watchdog has not yet run to cancel the context (after a process
// pause, say, the caller may well run first); and it returns the reason as
// soon as the Client has ended the lock, before the context's cancellation
// has been delivered. Check Err just before acting on the lock; the fencing
// token covers a pause after the check.
func (l *Lock) Err() error {
	h := l.h
	if h.ctx.Err() != nil {
		return context.Cause(h.ctx)
	}
	if l.released.Load() {
		return ErrReleased
	}
	return h.errChain(time.Since(epoch).Nanoseconds())
}

// errChain is errAt of h and of the locks whose ends reach h's context one
// step later: those it was acquired under and, for a set, its parts.
func (h *hold) errChain(now int64) error {
	for p := h; p != nil; p = p.parent {
		if err := p.errAt(now); err != nil {
			return err
		}
		// The parts' own enclosing locks are parts too, or enclose the
		// set: errAt is enough for them.
		for _, q := range p.parts {
			if err := q.errAt(now); err != nil {
				return err
			}
		}
	}
	return nil
}

// Deadline returns the local time at which the lock's context will be
// cancelled unless a refresh is confirmed first; time.Until of it is the
// time left. ok is false when the grant has no time bound (it ends only when
// the service reports it lost) or the lock has ended.
func (l *Lock) Deadline() (deadline time.Time, ok bool) {
	if l.Err() != nil {
		return time.Time{}, false
	}
	c := l.h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if l.h.ended || l.h.deadline().IsZero() {
		return time.Time{}, false
	}
	return l.h.deadline(), true
}

// Refresh extends the lease now, without waiting for the watchdog. It returns
// an error matching ErrLockLost if the lock was lost (and then the lock ends)
// and ErrNotHeld after Release.
func (l *Lock) Refresh(ctx context.Context) error {
	h := l.h
	if l.released.Load() {
		return keyErr("refresh", h.key, fmt.Errorf("%w: released", ErrNotHeld))
	}
	if err := h.endedErr(); err != nil {
		return keyErr("refresh", h.key, err)
	}
	v, err := h.lease.Refresh(ctx, h.cfg.ttl)
	return keyErr("refresh", h.key, h.c.refreshed(h, v, err, false))
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

	ctx    context.Context
	cancel context.CancelCauseFunc

	// The parts of a LockSet's hold (see AcquireAll): a hold with parts
	// has no lease of its own, only a context that ends with any of them.
	parts []*hold

	// Read by Err, which takes no lock: the cause once the hold ended, the
	// local deadline and the end of MaxHold. Written under c.mu (until
	// also by Err, to mark the deadline passed).
	over     atomic.Pointer[error]
	until    atomic.Int64 // the deadline in ns since epoch, noDeadline or deadlinePassed
	maxUntil atomic.Int64 // MaxHold's end in ns since epoch, or noDeadline

	// Guarded by c.mu.
	started   bool
	lostEarly error // loss reported before the grant was started
	count     int   // live handles
	ended     bool  // lost or released: the context is (being) cancelled
	cause     error // why it ended
	nextRenew time.Time
	inflight  bool // a refresh is under way
	when      time.Time
	idx       int // position in c.heap, -1 when absent

	// Locks acquired under this one, whose contexts end with it. Guarded by
	// kidsMu, not c.mu: the enclosing lock may belong to another Client.
	kidsMu   sync.Mutex
	kids     map[*hold]struct{}
	kidCause error // set once this lock's context ended
	orphaned bool  // ended or released: not to be adopted; guarded by parent.kidsMu

	// The lock this one was acquired under, or nil. Set in Client.start
	// before the hold is published, never changed after.
	parent *hold

	relMu   sync.Mutex
	relDone bool // the service answered the release, either way
	relErr  error
}

// endedErr reports why the hold ended, or nil while it is held.
func (h *hold) endedErr() error {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	switch {
	case !h.ended:
		return nil
	case h.cause == ErrReleased:
		return fmt.Errorf("%w: released", ErrNotHeld)
	}
	return h.cause
}

// epoch is the origin of hold.until, read on the monotonic clock.
var epoch = time.Now()

// Values of hold.until besides a deadline.
const (
	noDeadline     = math.MaxInt64
	deadlinePassed = math.MinInt64 // Err saw the deadline pass: for good
)

func untilOf(d time.Time) int64 {
	if d.IsZero() {
		return noDeadline
	}
	return d.Sub(epoch).Nanoseconds()
}

func timeOf(u int64) time.Time {
	switch u {
	case noDeadline:
		return time.Time{}
	case deadlinePassed:
		return epoch // long past
	}
	return epoch.Add(time.Duration(u))
}

// setLimitsLocked sets the local deadline and the end of MaxHold (zero:
// none) of a hold being started.
func (h *hold) setLimitsLocked(deadline, maxHoldAt time.Time) {
	h.until.Store(untilOf(deadline))
	h.maxUntil.Store(untilOf(maxHoldAt))
}

// extendDeadlineLocked moves the deadline to d, unless Err has already
// reported the current one passed (the only change c.mu does not
// exclude); it reports whether it did.
func (h *hold) extendDeadlineLocked(d time.Time) bool {
	u := h.until.Load()
	return u != deadlinePassed && h.until.CompareAndSwap(u, untilOf(d))
}

// deadline is the local deadline, zero if none; long past once Err has
// seen it pass. It takes no lock.
func (h *hold) deadline() time.Time { return timeOf(h.until.Load()) }

// maxHoldAt is the end of MaxHold, zero if none.
func (h *hold) maxHoldAt() time.Time { return timeOf(h.maxUntil.Load()) }

// errAt is why h ended, or ErrMaxHoldExceeded or ErrDeadlinePassed if
// MaxHold or its deadline is passed at now (ns since epoch), or nil. Once it has reported the deadline passed,
// the deadline cannot be extended any more: the lock is lost for good.
func (h *hold) errAt(now int64) error {
	if p := h.over.Load(); p != nil {
		return *p
	}
	if now >= h.maxUntil.Load() {
		return ErrMaxHoldExceeded
	}
	for {
		switch u := h.until.Load(); {
		case u == deadlinePassed:
			return ErrDeadlinePassed
		case now < u:
			return nil
		case h.until.CompareAndSwap(u, deadlinePassed):
			return ErrDeadlinePassed
		}
	}
}

// renewAfterLocked is when to renew next: after the renewal interval, but
// never later than halfway to the deadline, so that a grant confirmed late
// is still renewed in time.
func (h *hold) renewAfterLocked(now time.Time) time.Time {
	next := now.Add(h.cfg.renewInterval())
	if d := h.deadline(); !d.IsZero() {
		if half := now.Add(d.Sub(now) / 2); half.Before(next) {
			next = half
		}
	}
	return next
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
	c.end([]*hold{h}, err, false)
}

// adopt makes kid's context end when h's does, at once and in the same
// goroutine (not one goroutine hop later, as context.AfterFunc would).
// A kid that ended or was released before it was adopted (Close can
// release it as soon as it is published; a set's part can end while the
// set is being bound) is left alone: nothing would take it out again.
func (h *hold) adopt(kid *hold) {
	h.kidsMu.Lock()
	if kid.orphaned || kid.ctx.Err() != nil {
		h.kidsMu.Unlock()
		return
	}
	cause := h.kidCause
	if cause == nil {
		if h.kids == nil {
			h.kids = map[*hold]struct{}{}
		}
		h.kids[kid] = struct{}{}
	}
	h.kidsMu.Unlock()
	if cause != nil {
		kid.cancelTree(cause)
	}
}

// orphan detaches h from the lock it was acquired under, for good.
func (h *hold) orphan() {
	if p := h.parent; p != nil {
		p.kidsMu.Lock()
		delete(p.kids, h)
		h.orphaned = true
		p.kidsMu.Unlock()
	}
}

// cancelTree ends h's context and those of the locks acquired under it.
func (h *hold) cancelTree(cause error) {
	h.cancel(cause)
	h.kidsMu.Lock()
	if h.kidCause != nil {
		h.kidsMu.Unlock()
		return
	}
	h.kidCause = cause
	kids := h.kids
	h.kids = nil
	h.kidsMu.Unlock()
	for k := range kids {
		k.cancelTree(cause)
	}
	// Ended, h need not be ended by anyone any more (a lost lock may never
	// be released).
	if h.parts != nil {
		h.leave()
	} else {
		h.orphan()
	}
}

// enders are the holds whose end ends a set's hold h: its parts and the
// lock it was acquired under.
func (h *hold) enders() []*hold {
	es := slices.Clip(h.parts)
	if h.parent != nil {
		es = append(es, h.parent)
	}
	return es
}

// leave takes a set's ended hold h out of its enders' kids.
func (h *hold) leave() {
	for _, p := range h.enders() {
		p.kidsMu.Lock()
		delete(p.kids, h)
		p.kidsMu.Unlock()
	}
}

// releaseLease returns the lease to the service, retrying transient
// failures. Once the service has answered (released, or not ours any more)
// later calls return the same answer without asking again.
func (h *hold) releaseLease(ctx context.Context) error {
	h.relMu.Lock()
	defer h.relMu.Unlock()
	if h.relDone {
		return h.relErr
	}
	err := retry(ctx, h.cfg.retry, func() error { return h.lease.Release(ctx) })
	if err == nil || errors.Is(err, ErrLockLost) {
		h.relDone, h.relErr = true, err
	}
	return err
}

// heldKey is the context key under which lock contexts record their locks.
type heldKey struct{}

// heldNode links the locks a context was derived from, innermost first.
type heldNode struct {
	c   *Client
	key string
	h   *hold // the lock, for reentrant acquisition
	// scope is the hold whose end ends the context: h, or the hold of the
	// LockSet whose context it is. Locks acquired under the context are
	// adopted by it.
	scope *hold
	next  *heldNode
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
