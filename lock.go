package distlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
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
	g        *grant
	released atomic.Bool // this handle
	set      *scope      // the scope of the set this is a part of, or nil
}

// Key returns the locked key.
func (l *Lock) Key() string { return l.g.key }

// Token returns the fencing token of the grant: strictly greater than the
// token of every earlier grant of this key. Reentrant handles share it.
func (l *Lock) Token() uint64 { return l.g.token }

// Slot returns the slot of a permit acquired with Semaphore.Slots (see
// WithSemaphore), in [0, Limit), and ok false for a lock or a permit
// without a slot.
func (l *Lock) Slot() (slot int, ok bool) {
	if s, ok := l.g.lease.(driver.SlotLease); ok && l.g.cfg.semaphore.Slots {
		return s.Slot(), true
	}
	return 0, false
}

// Shared reports whether the lock is a shared (read) lock: acquired with
// WithShared, and not a re-entry of an exclusive lock.
func (l *Lock) Shared() bool { return l.g.cfg.shared }

// Permit reports whether the lock is a permit of a semaphore: acquired
// with WithSemaphore.
func (l *Lock) Permit() bool { return l.g.cfg.permit }

// Context returns a context that is cancelled when the lock is lost or
// released, or when a lock it was acquired under ends. context.Cause of it
// is the reason it ended.
func (l *Lock) Context() context.Context { return l.g.scope.context() }

// Done returns a channel that is closed when the lock's context ends.
func (l *Lock) Done() <-chan struct{} { return l.g.scope.context().Done() }

// Err returns nil while the lock is held and its context has not ended;
// otherwise why not:
//   - an error matching ErrLockLost when the grant is lost (ErrDeadlinePassed,
//     ErrMaxHoldExceeded, or what the service reported);
//   - ErrReleased once this handle (or the last handle on the grant) was
//     released; other reentrant handles on the grant still hold it;
//   - an *EnclosingError when the lock is still held but a lock (or set) it
//     was acquired under ended, and with it the lock's context.
//
// Err describes the lock as it is now: a lock whose context ended with an
// *EnclosingError and that is lost later reports the loss.
//
// Err is exact at the instant it is called, which the context cannot be:
// once the local deadline has passed it returns ErrDeadlinePassed, even if
// the watchdog has not yet run to cancel the context (after a process
// pause, say, the caller may well run first); and it returns the reason as
// soon as the Client has ended the lock, before the context's cancellation
// has been delivered. Check Err just before acting on the lock; the fencing
// token covers a pause after the check. Once Err has returned an error it
// never returns nil again.
func (l *Lock) Err() error {
	if l.released.Load() {
		return ErrReleased
	}
	return l.g.scope.why(nowNanos())
}

// AtRisk returns a channel that is closed when the lock is at risk: its
// local deadline is within the at-risk window (WithAtRiskWindow) because no
// renewal has been confirmed in time (renewals failing or hanging, or a
// lock with WithRenewal(NoRenewal) not refreshed by its holder). It closes before the
// lock's context is cancelled for that deadline, so that the holder can
// checkpoint or stop in an orderly way. A healthy lock is never at risk. A
// renewal confirmed afterwards re-arms it: later calls return a new,
// open channel. A lock that ends for another reason (released, or reported
// lost by the service) may end without it closing: watch Done as well.
func (l *Lock) AtRisk() <-chan struct{} {
	c := l.g.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return l.g.atRiskLocked()
}

// Deadline returns the local time at which the lock's context will be
// cancelled unless a refresh is confirmed first; time.Until of it is the
// time left. ok is false when the grant has no time bound (it ends only when
// the service reports it lost) or Err reports the lock ended.
func (l *Lock) Deadline() (deadline time.Time, ok bool) {
	if l.Err() != nil {
		return time.Time{}, false
	}
	d := l.g.deadline()
	return d, !d.IsZero()
}

// RiskWindow returns the Deadline together with the at-risk window that
// goes with it (see AtRisk and WithAtRiskWindow), read at one instant:
// the lock is at risk from deadline less window unless a renewal is
// confirmed first. Both are set with each confirmation of the grant, and
// with the default window the Client sends the next renewal at least two
// windows before the deadline, so that a healthy lock never comes within
// the window of its deadline. ok is as for Deadline.
//
// A process that watches the lock from outside (the CLI's supervisor)
// can end its work at the start of the window: it then ends no sooner
// than the lock is at risk, whatever the backend's lease.
func (l *Lock) RiskWindow() (deadline time.Time, window time.Duration, ok bool) {
	c := l.g.c
	c.mu.Lock()
	deadline, window = l.g.deadline(), l.g.window
	c.mu.Unlock()
	if deadline.IsZero() || l.Err() != nil {
		return time.Time{}, 0, false
	}
	return deadline, window, true
}

// Refresh extends the lease now, without waiting for the watchdog. It returns
// an error matching ErrLockLost if the lock was lost (and then the lock ends)
// and ErrNotHeld after Release. A lock whose context ended with an
// *EnclosingError is still held, and can be refreshed.
func (l *Lock) Refresh(ctx context.Context) error {
	g := l.g
	if l.released.Load() {
		return keyErr("refresh", g.key, fmt.Errorf("%w: released", ErrNotHeld))
	}
	switch err := g.cause(); err {
	case nil:
	case ErrReleased:
		return keyErr("refresh", g.key, fmt.Errorf("%w: released", ErrNotHeld))
	default:
		return keyErr("refresh", g.key, err)
	}
	v, err := g.lease.Refresh(ctx, g.cfg.ttl)
	return keyErr("refresh", g.key, g.c.applyRefresh(g, v, err, byHolder))
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
		return keyErr("release", l.g.key, fmt.Errorf("%w: released twice", ErrNotHeld))
	}
	if s := l.set; s != nil {
		// A part released on its own ends its set first, even when the
		// grant lives on in other handles.
		s.end(s.ownErr(nowNanos()))
	}
	return keyErr("release", l.g.key, l.g.c.releaseHandle(ctx, l.g))
}
