package distlock

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// A grant is one lease from the Backend, shared by the reentrant handles
// (Locks) on it. Its states:
//
//	starting  Backend.Acquire returned the lease; start has not published
//	          it yet. A loss the backend reports now waits in lostEarly.
//	held      published in Client.grants and in the watchdog's heap; end
//	          is nil.
//	ended     end holds why, for good: ErrReleased (its last handle was
//	          released, or the Client closed) or an error matching
//	          ErrLockLost. Its scope has ended too.
//
// Who guards what:
//   - set before the grant is published, never changed after: c, key, cfg,
//     lease, token, since, scope;
//   - atomics, read without a lock (by Err): end, written only under c.mu;
//     until (the local deadline), written under c.mu, except for Err's one
//     move to deadlinePassed; maxUntil, written once before publication;
//   - c.mu: started, lostEarly, handles, atRisk, riskFired, window, and
//     the watchdog's bookkeeping (nextRenew, inflight, when, idx);
//   - relMu: the release's outcome. It is held while the Backend is asked,
//     with no other lock held.
//
// Lock order, for the whole package: c.mu is never held while a scope's mu
// or a grant's relMu is taken, nor while a Backend, a logger or a context's
// cancellation is called; a scope's mu is a leaf (nothing is called or
// locked under it but the making, and cancelling, of its own new context).
type grant struct {
	c     *Client
	key   string
	cfg   config
	lease driver.Lease
	token uint64
	since time.Time
	scope *scope // the lock's context

	end      atomic.Pointer[error]
	until    atomic.Int64 // the deadline in ns since epoch, or noDeadline or deadlinePassed
	maxUntil atomic.Int64 // MaxHold's end in ns since epoch, or noDeadline

	started   bool
	lostEarly error
	handles   int
	atRisk    chan struct{} // made by Lock.AtRisk, or closedChan
	riskFired bool          // atRisk is (to be) closed: re-armed by a renewal
	window    time.Duration // the at-risk window, set with each confirmation
	nextRenew time.Time
	inflight  bool      // the watchdog's refresh is under way
	when      time.Time // the next event, the heap's order
	idx       int       // position in the watchdog's heap, -1 when absent

	relMu   sync.Mutex
	relDone bool // the service answered the release, either way
	relErr  error

	// What a held grant needs besides, in it (see TestCycleAllocs): its
	// scope (the lock's context), the node that records the lock in that
	// context, and the Lock of its first handle.
	ownScope scope
	node     heldNode
	first    Lock
}

func newGrant(c *Client, key string, cfg config) *grant {
	return &grant{c: c, key: key, cfg: cfg, idx: -1}
}

// errPtr returns a pointer to err for an atomic.Pointer[error]; ErrReleased,
// the end of most locks, shares one (see TestCycleAllocs).
func errPtr(err error) *error {
	if err == ErrReleased {
		return &errReleased
	}
	p := new(error) // not &err: see TestCycleAllocs
	*p = err
	return p
}

var errReleased = ErrReleased

// endedLocked reports whether g ended.
func (g *grant) endedLocked() bool { return g.end.Load() != nil }

// cause is why g ended, or nil.
func (g *grant) cause() error {
	if p := g.end.Load(); p != nil {
		return *p
	}
	return nil
}

// errAt is why g ended, or ErrMaxHoldExceeded or ErrDeadlinePassed if
// MaxHold or the deadline is passed at now (ns since epoch), or nil. Once it
// has reported the deadline passed, the deadline cannot be extended any
// more: the lock is lost for good.
func (g *grant) errAt(now int64) error {
	if err := g.cause(); err != nil {
		return err
	}
	if now >= g.maxUntil.Load() {
		return ErrMaxHoldExceeded
	}
	for {
		switch u := g.until.Load(); {
		case u == deadlinePassed:
			return ErrDeadlinePassed
		case now < u:
			return nil
		case g.until.CompareAndSwap(u, deadlinePassed):
			return ErrDeadlinePassed
		}
	}
}

// epoch is the origin of until and maxUntil, read on the monotonic clock.
var epoch = time.Now()

// nowNanos is the time now in ns since epoch.
func nowNanos() int64 { return time.Since(epoch).Nanoseconds() }

// Values of until besides a deadline.
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

// setLimits sets the local deadline and the end of MaxHold (zero: none) of
// a grant being started.
func (g *grant) setLimits(deadline, maxHoldAt time.Time) {
	g.until.Store(untilOf(deadline))
	g.maxUntil.Store(untilOf(maxHoldAt))
}

// extendDeadlineLocked moves the deadline to d, unless Err has already
// reported the current one passed (the only change c.mu does not
// exclude); it reports whether it did.
func (g *grant) extendDeadlineLocked(d time.Time) bool {
	u := g.until.Load()
	return u != deadlinePassed && g.until.CompareAndSwap(u, untilOf(d))
}

// deadline is the local deadline, zero if none; long past once Err has
// seen it pass. It takes no lock.
func (g *grant) deadline() time.Time { return timeOf(g.until.Load()) }

// maxHoldAt is the end of MaxHold, zero if none.
func (g *grant) maxHoldAt() time.Time { return timeOf(g.maxUntil.Load()) }

// confirmedLocked schedules g after a confirmation at now (the grant, or a
// renewal): its next renewal, and the at-risk window that goes with it.
func (g *grant) confirmedLocked(now time.Time) {
	g.nextRenew = g.renewAfterLocked(now)
	g.window = g.windowLocked(now)
}

// renewAfterLocked is when to renew next: after the renewal interval, but
// never later than halfway to the deadline, so that a grant confirmed late
// is still renewed in time.
func (g *grant) renewAfterLocked(now time.Time) time.Time {
	next := now.Add(g.cfg.renewInterval())
	if d := g.deadline(); !d.IsZero() {
		if half := now.Add(d.Sub(now) / 2); half.Before(next) {
			next = half
		}
	}
	return next
}

// windowLocked is the at-risk window after a confirmation at now, once
// nextRenew is set: WithAtRiskWindow's, or else a third of the TTL, cut to
// half the time between the next renewal (now, for a lock with NoRenewal)
// and the deadline, so that the renewal has the other half to be
// confirmed in. It is measured on the deadline the service confirmed,
// not on the TTL asked for: a session backend's lease is its session
// timeout, which may be shorter.
func (g *grant) windowLocked(now time.Time) time.Duration {
	if g.cfg.atRisk > 0 {
		return g.cfg.atRisk
	}
	d := g.deadline()
	if d.IsZero() {
		return 0
	}
	from := now
	if g.cfg.renews() {
		from = g.nextRenew
	}
	return max(min(g.cfg.ttl/defaultRenewFraction, d.Sub(from)/2), 0)
}

// closedChan is a closed channel, for an at-risk signal that fired before
// anyone asked for it.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// riskAtLocked is when g becomes at risk unless a renewal is confirmed
// first; zero when it has no deadline or is at risk already.
func (g *grant) riskAtLocked() time.Time {
	d := g.deadline()
	if g.riskFired || d.IsZero() {
		return time.Time{}
	}
	return d.Add(-g.window)
}

// fireRiskLocked closes the at-risk channel.
func (g *grant) fireRiskLocked() {
	g.riskFired = true
	if g.atRisk == nil {
		g.atRisk = closedChan
	} else if g.atRisk != closedChan {
		close(g.atRisk)
	}
}

// rearmRiskLocked opens a new at-risk channel after a renewal moved the
// deadline out of the window.
func (g *grant) rearmRiskLocked(now time.Time) {
	if g.riskFired && g.deadline().Sub(now) > g.window {
		g.riskFired, g.atRisk = false, nil
	}
}

// atRiskLocked returns the at-risk channel, making it if need be.
func (g *grant) atRiskLocked() <-chan struct{} {
	if g.atRisk == nil {
		g.atRisk = make(chan struct{})
	}
	return g.atRisk
}

// onLost is the AcquireOptions.OnLost callback of this grant.
func (g *grant) onLost(err error) {
	c := g.c
	c.mu.Lock()
	if !g.started {
		if g.lostEarly == nil {
			g.lostEarly = err
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.lose([]*grant{g}, err, lossServiceReported)
}

// releaseLease returns the lease to the service, retrying transient
// failures. Once the service has answered (released, or not ours any more)
// later calls return the same answer without asking again.
func (g *grant) releaseLease(ctx context.Context) error {
	g.relMu.Lock()
	defer g.relMu.Unlock()
	if g.relDone {
		return g.relErr
	}
	err := retry(ctx, g.cfg.retry, func() error { return g.lease.Release(ctx) })
	if err == nil || errors.Is(err, ErrLockLost) {
		g.relDone, g.relErr = true, err
	}
	return err
}
