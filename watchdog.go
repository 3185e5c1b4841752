package distlock

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The watchdog is one goroutine per Client that runs while some held lock
// has a renewal, a deadline or a MaxHold due. Every hold has one entry in a
// min-heap ordered by its next event, so holding many locks costs a heap
// entry each, not a goroutine or a timer each. Due renewals are sent
// together, in one round trip when the backend is a BatchRefresher.

// refreshWorkers bounds the goroutines refreshing one batch on a backend that
// cannot batch.
const refreshWorkers = 16

// scheduleLocked (re)computes h's next event and its place in the heap.
func (c *Client) scheduleLocked(h *hold) {
	var when time.Time
	earliest := func(t time.Time) {
		if !t.IsZero() && (when.IsZero() || t.Before(when)) {
			when = t
		}
	}
	if !h.inflight && !h.cfg.noRenew {
		earliest(h.nextRenew)
	}
	earliest(h.deadline())
	earliest(h.maxHoldAt())
	h.when = when
	switch {
	case when.IsZero():
		c.unscheduleLocked(h)
		return
	case h.idx < 0:
		heap.Push(&c.heap, h)
	default:
		heap.Fix(&c.heap, h.idx)
	}
	// A watchdog started now reads the heap itself. A running one needs
	// waking only if this event comes before the one its timer is set for:
	// a timer that fires early finds nothing due and is set again. So a
	// lock taken after another was released (the heap emptied, the timer
	// still set for the old lock's renewal or for the watchdog's linger)
	// costs no wake-up.
	switch {
	case !c.running:
		c.running = true
		c.starts++
		c.goBackgroundLocked(c.watch)
	case c.heap[0] == h && (c.sleepUntil.IsZero() || when.Before(c.sleepUntil)):
		c.kickLocked()
	}
}

func (c *Client) unscheduleLocked(h *hold) {
	if h.idx < 0 {
		return
	}
	// An emptied heap does not wake the watchdog: it lingers (see watch),
	// so that locks taken one after another reuse one goroutine. Close
	// wakes it.
	heap.Remove(&c.heap, h.idx)
	if len(c.heap) == 0 {
		c.emptySince = time.Now()
	}
}

func (c *Client) kickLocked() {
	select {
	case c.kick <- struct{}{}:
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
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		c.mu.Lock()
		c.sleepUntil = time.Time{}
		now := time.Now()
		if len(c.heap) == 0 {
			if c.emptySince.IsZero() {
				c.emptySince = now
			}
			idleAt := c.emptySince.Add(watchdogLinger)
			if c.closed || !now.Before(idleAt) {
				c.running = false
				c.mu.Unlock()
				return
			}
			c.sleepUntil = idleAt
			timer.Reset(idleAt.Sub(now))
			c.mu.Unlock()
			select {
			case <-timer.C:
			case <-c.kick:
			}
			continue
		}
		if wait := c.heap[0].when.Sub(now); wait > 0 {
			// The timer is set before unlocking, so that it is never
			// later than sleepUntil as scheduleLocked sees it.
			c.sleepUntil = c.heap[0].when
			timer.Reset(wait)
			c.mu.Unlock()
			select {
			case <-timer.C:
			case <-c.kick:
			}
			continue
		}
		batch, expired, tooLong := c.dueLocked(now)
		if len(c.heap) == 0 {
			c.emptySince = now // the due holds all ended
		}
		if len(batch) > 0 {
			c.goBackgroundLocked(func() { c.refreshBatch(batch) })
		}
		c.mu.Unlock()
		if len(expired) > 0 {
			c.end(expired, ErrDeadlinePassed, true)
		}
		if len(tooLong) > 0 {
			c.end(tooLong, ErrMaxHoldExceeded, true)
		}
	}
}

// dueLocked takes the holds whose events are due at now. Renewals due a
// little later (a quarter of their interval) join the batch, so that locks
// acquired at different times come to share round trips.
func (c *Client) dueLocked(now time.Time) (batch, expired, tooLong []*hold) {
	var later []*hold
	horizon := now.Add(c.cfg.renewInterval() / 4)
	for len(c.heap) > 0 && !c.heap[0].when.After(horizon) {
		h := heap.Pop(&c.heap).(*hold)
		switch {
		case !h.deadline().IsZero() && !h.deadline().After(now):
			expired = append(expired, h)
		case !h.maxHoldAt().IsZero() && !h.maxHoldAt().After(now):
			tooLong = append(tooLong, h)
		case !h.inflight && !h.cfg.noRenew && !h.nextRenew.After(now.Add(h.cfg.renewInterval()/4)):
			h.inflight = true
			batch = append(batch, h)
			later = append(later, h)
		default:
			later = append(later, h)
		}
	}
	for _, h := range later {
		c.scheduleLocked(h)
	}
	return batch, expired, tooLong
}

// refreshBatch refreshes due holds, in one call when the backend batches.
func (c *Client) refreshBatch(batch []*hold) {
	// The batch is worth trying until the latest deadline in it; holds
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
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	if c.batch != nil {
		// One call per TTL: the backend refreshes to one TTL at a time.
		byTTL := map[time.Duration][]*hold{}
		for _, h := range batch {
			byTTL[h.cfg.ttl] = append(byTTL[h.cfg.ttl], h)
		}
		for ttl, hs := range byTTL {
			leases := make([]Lease, len(hs))
			for i, h := range hs {
				leases[i] = h.lease
			}
			res := c.batch.RefreshAll(ctx, leases, ttl)
			for i, h := range hs {
				r := RefreshResult{Err: errors.New("distlock: backend returned too few refresh results")}
				if i < len(res) {
					r = res[i]
				}
				c.refreshed(h, r.Validity, r.Err, true)
			}
		}
		return
	}

	var wg sync.WaitGroup
	next := make(chan *hold)
	for range min(refreshWorkers, len(batch)) {
		wg.Go(func() {
			for h := range next {
				v, err := h.lease.Refresh(ctx, h.cfg.ttl)
				c.refreshed(h, v, err, true)
			}
		})
	}
	for _, h := range batch {
		next <- h
	}
	close(next)
	wg.Wait()
}

// refreshed applies the outcome of a refresh of h; fromWatchdog marks the
// refresh that the watchdog had in flight. It returns err, or why the lock
// ended if it ended meanwhile.
func (c *Client) refreshed(h *hold, v Validity, err error, fromWatchdog bool) error {
	if err != nil && errors.Is(err, ErrLockLost) {
		c.end([]*hold{h}, err, false)
		return err
	}
	c.mu.Lock()
	now := time.Now() // under c.mu; an Err that sees the deadline pass after this is caught by extendDeadlineLocked
	if fromWatchdog {
		h.inflight = false
	}
	if h.ended {
		cause := h.cause
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
		c.end([]*hold{h}, ErrDeadlinePassed, true)
		return ErrDeadlinePassed
	}
	deadline := h.deadline()
	if !deadline.IsZero() && !now.Before(deadline) {
		return tooLate()
	}
	var again time.Duration
	if err == nil {
		if v.TTL > 0 {
			if d := v.Sent.Add(h.cfg.usable(v.TTL)); d.After(deadline) && !h.extendDeadlineLocked(d) {
				return tooLate() // Err saw the deadline pass since now was read
			}
		}
		h.nextRenew = h.renewAfterLocked(now)
	} else if fromWatchdog {
		// Try again soon, and well before the deadline.
		again = h.cfg.renewInterval()
		if !deadline.IsZero() {
			again = min(again, max(deadline.Sub(now)/3, 5*time.Millisecond))
		}
		h.nextRenew = now.Add(again)
	}
	c.scheduleLocked(h)
	c.mu.Unlock()
	if err != nil && fromWatchdog {
		c.cfg.logger.Warn("distlock: refresh failed", "key", h.key, "token", h.token, "err", err, "retry_in", again)
	}
	return err
}

// holdHeap orders holds by their next event.
type holdHeap []*hold

func (q holdHeap) Len() int           { return len(q) }
func (q holdHeap) Less(i, j int) bool { return q[i].when.Before(q[j].when) }
func (q holdHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].idx, q[j].idx = i, j
}
func (q *holdHeap) Push(x any) {
	h := x.(*hold)
	h.idx = len(*q)
	*q = append(*q, h)
}
func (q *holdHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.idx = -1
	*q = old[:len(old)-1]
	return h
}
