package distlock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// The watchdog is one goroutine per Client that runs while some held grant
// has a renewal, a deadline or a MaxHold due. Every such grant has one entry
// in a min-heap ordered by its next event, so holding many locks costs a
// heap entry each, not a goroutine or a timer each. Due renewals are sent
// together, in one round trip when the backend is a BatchRefresher.
//
// Its states: stopped (running false); running, asleep until sleepUntil or
// a kick; running, handling due events. All its fields, and the grants'
// watchdog bookkeeping, are guarded by the Client's mu.
type watchdog struct {
	heap    grantHeap
	running bool
	starts  int // goroutines started, for tests
	// sleepUntil is when the sleeping watchdog's timer fires (zero while
	// it is not asleep).
	sleepUntil time.Time
	// emptySince is when the heap last became empty: the watchdog exits
	// watchdogLinger after it (or later, when its timer was set for later).
	emptySince time.Time
	kick       chan struct{} // wakes the watchdog when its next event changes
}

func newWatchdog() watchdog { return watchdog{kick: make(chan struct{}, 1)} }

// refreshWorkers bounds the goroutines refreshing one batch on a backend that
// cannot batch.
const refreshWorkers = 16

// scheduleLocked (re)computes g's next event and its place in the heap.
func (c *Client) scheduleLocked(g *grant) {
	var when time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (when.IsZero() || t.Before(when)) {
			when = t
		}
	}
	if !g.inflight && g.cfg.renews() {
		earliest(g.nextRenew)
	}
	earliest(g.deadline())
	earliest(g.maxHoldAt())
	earliest(g.riskAtLocked())
	g.when = when
	wd := &c.wd
	switch {
	case when.IsZero():
		c.unscheduleLocked(g)
		return
	case g.idx < 0:
		heap.Push(&wd.heap, g)
	default:
		heap.Fix(&wd.heap, g.idx)
	}
	// A watchdog started now reads the heap itself. A running one needs
	// waking only if this event comes before the one its timer is set for:
	// a timer that fires early finds nothing due and is set again. So a
	// lock taken after another was released (the heap emptied, the timer
	// still set for the old lock's renewal or for the watchdog's linger)
	// costs no wake-up.
	switch {
	case !wd.running:
		wd.running = true
		wd.starts++
		c.goBackgroundLocked(c.watch)
	case wd.heap[0] == g && (wd.sleepUntil.IsZero() || when.Before(wd.sleepUntil)):
		wd.kickLocked()
	}
}

func (c *Client) unscheduleLocked(g *grant) {
	if g.idx < 0 {
		return
	}
	// An emptied heap does not wake the watchdog: it lingers (see watch),
	// so that locks taken one after another reuse one goroutine. Close
	// wakes it.
	heap.Remove(&c.wd.heap, g.idx)
	if len(c.wd.heap) == 0 {
		c.wd.emptySince = time.Now()
	}
}

func (wd *watchdog) kickLocked() {
	select {
	case wd.kick <- struct{}{}:
	default:
	}
}

// watchdogLinger is how long the watchdog waits with no lock held before
// it exits, so that locks taken one after another, a few milliseconds
// apart, do not start a goroutine each.
const watchdogLinger = time.Second

// watch is the watchdog loop. It exits when the heap has stayed empty for
// watchdogLinger, or at once once the Client is closed. An emptied heap
// does not wake it, so a watchdog asleep until a released lock's renewal
// time notices the empty heap only then, and exits at the later of that
// time and watchdogLinger after the heap emptied.
func (c *Client) watch() {
	wd := &c.wd
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		wd.sleepUntil = time.Time{}
		now := time.Now()
		if len(wd.heap) == 0 {
			if wd.emptySince.IsZero() {
				wd.emptySince = now
			}
			idleAt := wd.emptySince.Add(watchdogLinger)
			if c.closed || !now.Before(idleAt) {
				wd.running = false
				c.mu.Unlock()
				return
			}
			wd.sleepUntil = idleAt
			timer.Reset(idleAt.Sub(now))
			c.mu.Unlock()
			select {
			case <-timer.C:
			case <-wd.kick:
			}
			continue
		}
		if wait := wd.heap[0].when.Sub(now); wait > 0 {
			// The timer is set before unlocking, so that it is never
			// later than sleepUntil as scheduleLocked sees it.
			wd.sleepUntil = wd.heap[0].when
			timer.Reset(wait)
			c.mu.Unlock()
			select {
			case <-timer.C:
			case <-wd.kick:
			}
			continue
		}
		batch, expired, tooLong, risky := c.dueLocked(now)
		if len(wd.heap) == 0 {
			wd.emptySince = now // the due grants all ended
		}
		if len(batch) > 0 {
			c.goBackgroundLocked(func() { c.refreshBatch(batch) })
		}
		c.mu.Unlock()
		for _, g := range risky {
			c.cfg.logger.Warn("distlock: lock at risk", "key", shortKey(g.key), "token", g.token, "backend", c.metrics.backend.Value.AsString(),
				"time_left", time.Until(g.deadline()).Round(time.Millisecond))
		}
		if len(expired) > 0 {
			c.expire(expired, ErrDeadlinePassed)
		}
		if len(tooLong) > 0 {
			c.expire(tooLong, ErrMaxHoldExceeded)
		}
	}
}

// dueLocked takes the grants whose events are due at now. Renewals due a
// little later (a quarter of their interval) join the batch, so that locks
// acquired at different times come to share round trips.
func (c *Client) dueLocked(now time.Time) (batch, expired, tooLong, risky []*grant) {
	var later []*grant
	horizon := now.Add(c.cfg.renewInterval() / 4)
	for len(c.wd.heap) > 0 && !c.wd.heap[0].when.After(horizon) {
		g := heap.Pop(&c.wd.heap).(*grant)
		switch {
		case !g.deadline().IsZero() && !g.deadline().After(now):
			if !g.riskFired { // the watchdog is late: the lock was at risk
				g.fireRiskLocked()
			}
			expired = append(expired, g)
		case !g.maxHoldAt().IsZero() && !g.maxHoldAt().After(now):
			tooLong = append(tooLong, g)
		default:
			if r := g.riskAtLocked(); !r.IsZero() && !r.After(now) {
				g.fireRiskLocked()
				risky = append(risky, g)
			}
			if !g.inflight && g.cfg.renews() && !g.nextRenew.After(now.Add(g.cfg.renewInterval()/4)) {
				g.inflight = true
				batch = append(batch, g)
			}
			later = append(later, g)
		}
	}
	for _, g := range later {
		c.scheduleLocked(g)
	}
	return batch, expired, tooLong, risky
}

// refreshBatch refreshes due grants, in one call when the backend batches.
func (c *Client) refreshBatch(batch []*grant) {
	// The batch is worth trying until the latest deadline in it; grants
	// whose deadline passes first are ended by the watchdog meanwhile.
	var deadline time.Time
	for _, h := range batch {
		d := h.deadline() // c.mu is not held here
		if d.IsZero() {
			d = time.Now().Add(h.cfg.renewInterval())
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	ctx, cancel := context.WithDeadline(c.closing, deadline) // Close releases the grants: stop
	defer cancel()

	if c.batch != nil {
		// One call per TTL: the backend refreshes to one TTL at a time.
		byTTL := map[time.Duration][]*grant{}
		for _, h := range batch {
			byTTL[h.cfg.ttl] = append(byTTL[h.cfg.ttl], h)
		}
		for ttl, hs := range byTTL {
			leases := make([]driver.Lease, len(hs))
			for i, h := range hs {
				leases[i] = h.lease
			}
			res := c.batch.RefreshAll(ctx, leases, ttl)
			for i, h := range hs {
				r := driver.RefreshResult{Err: errors.New("distlock: backend returned too few refresh results")}
				if i < len(res) {
					r = res[i]
				}
				c.applyRefresh(h, r.Validity, r.Err, byWatchdog)
			}
		}
		return
	}

	var wg sync.WaitGroup
	next := make(chan *grant)
	for range min(refreshWorkers, len(batch)) {
		wg.Go(func() {
			for h := range next {
				v, err := h.lease.Refresh(ctx, h.cfg.ttl)
				c.applyRefresh(h, v, err, byWatchdog)
			}
		})
	}
	for _, h := range batch {
		next <- h
	}
	close(next)
	wg.Wait()
}

// refresher says who asked for a refresh: the holder (Lock.Refresh) or the
// watchdog, whose refresh in flight keeps the grant from being sent again.
type refresher int

const (
	byHolder refresher = iota
	byWatchdog
)

// applyRefresh applies the outcome of a refresh of g. It returns err, or
// why the grant ended if it ended meanwhile.
func (c *Client) applyRefresh(g *grant, v driver.Validity, err error, by refresher) error {
	if err != nil && errors.Is(err, ErrLockLost) {
		c.metrics.renewed(g.key, renewalLost, 0)
		c.lose([]*grant{g}, err, lossRevoked)
		return err
	}
	c.mu.Lock()
	now := time.Now() // under c.mu; an Err that sees the deadline pass after this is caught by extendDeadlineLocked
	if by == byWatchdog {
		g.inflight = false
	}
	if cause := g.cause(); cause != nil {
		c.mu.Unlock()
		if cause == ErrReleased {
			return fmt.Errorf("%w: released during the refresh", ErrNotHeld)
		}
		return cause
	}
	tooLate := func() error {
		// Confirmed too late: Err has been reporting the lock lost since
		// the deadline, and the watchdog is about to end it. A lock never
		// comes back.
		c.mu.Unlock()
		c.expire([]*grant{g}, ErrDeadlinePassed)
		return ErrDeadlinePassed
	}
	deadline := g.deadline()
	if !deadline.IsZero() && !now.Before(deadline) {
		return tooLate()
	}
	var again time.Duration
	headroom := deadline.Sub(now)
	if err == nil {
		if v.TTL > 0 {
			if d := v.Sent.Add(g.cfg.usable(v.TTL)); d.After(deadline) && !g.extendDeadlineLocked(d) {
				return tooLate() // Err saw the deadline pass since now was read
			}
		}
		g.confirmedLocked(now)
		g.rearmRiskLocked(now)
	} else if by == byWatchdog {
		// Try again soon, and well before the deadline.
		again = g.cfg.renewInterval()
		if !deadline.IsZero() {
			again = min(again, max(deadline.Sub(now)/3, 5*time.Millisecond))
		}
		g.nextRenew = now.Add(again)
	}
	c.scheduleLocked(g)
	c.mu.Unlock()
	if err == nil {
		c.metrics.renewed(g.key, renewedOK, headroom) // (none recorded for a grant without a deadline)
	} else {
		c.metrics.renewed(g.key, renewalFailed, 0)
	}
	switch {
	case err != nil && by == byWatchdog:
		c.cfg.logger.Warn("distlock: refresh failed", "key", shortKey(g.key), "token", g.token, "backend", c.metrics.backend.Value.AsString(), "err", err, "retry_in", again)
	case err == nil && c.debug():
		c.cfg.logger.Debug("distlock: renewed", "key", shortKey(g.key), "token", g.token, "valid_for", time.Until(g.deadline()).Round(time.Millisecond))
	}
	return err
}

// grantHeap orders grants by their next event.
type grantHeap []*grant

func (q grantHeap) Len() int           { return len(q) }
func (q grantHeap) Less(i, j int) bool { return q[i].when.Before(q[j].when) }
func (q grantHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].idx, q[j].idx = i, j
}
func (q *grantHeap) Push(x any) {
	h := x.(*grant)
	h.idx = len(*q)
	*q = append(*q, h)
}
func (q *grantHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.idx = -1
	*q = old[:len(old)-1]
	return h
}
