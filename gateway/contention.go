package gateway

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Bounds of what the gateway keeps for its dashboard.
const (
	waitSamples    = 512  // grant waits kept for the p95
	maxContended   = 1024 // lock names counted as contended; later ones are not
	topContended   = 10   // lock names in Contention.Contended
	rejectionsKept = 64   // stale-token rejections kept
	recentEndsKept = 64   // losses and forced releases shown by the dashboard
	waitersListed  = 256  // waiters listed by the dashboard
	sessionsListed = 500  // sessions listed by the dashboard
)

// KeyCount is a lock name and a count.
type KeyCount struct {
	Lock  string
	Count uint64
}

// Contention is how the locks held through a gateway are fought over,
// since the gateway started.
type Contention struct {
	Acquires uint64 // grants
	Handoffs uint64 // grants to an acquire that waited for another holder of this gateway
	// WaitP95 is the 95th percentile of the waits of the last 512 grants
	// to acquires that waited, and of the acquires waiting now, each
	// counted with how long it has waited so far (a lower bound of its
	// wait): a lock held for long shows while it is held, not only once
	// its waiters are granted it. 0 without any.
	WaitP95   time.Duration
	Waiting   int        // the acquires waiting now, counted in WaitP95
	Contended []KeyCount // the lock names most often found held, most first (at most 10)
}

// contention is the gateway's counts behind Contention and the dashboard;
// guarded by the Gateway's mu.
type contention struct {
	acquires, handoffs uint64
	waits              []waitSample // ring of waitSamples
	waitNext           int
	contended          map[string]uint64
	rejections         []rejection // the last rejectionsKept, oldest first
	waiters            map[*waiter]struct{}
}

// waitSample is the wait of one granted acquire.
type waitSample struct {
	lock string
	d    time.Duration
}

// waiter is an acquire that waits for a lock.
type waiter struct {
	lock  string
	owner string
	since time.Time
}

// rejection is a token refused as stale: a check that answered "not
// current", or a release with another grant's token.
type rejection struct {
	Op      string    `json:"op"` // check or release
	Lock    string    `json:"lock"`
	Token   string    `json:"token"`
	Current string    `json:"current,omitempty"` // the current grant's token, when the gateway knows it
	Time    time.Time `json:"time"`
}

// startAcquireLocked records an acquire of name by s that may wait, and
// whether the lock was held through the gateway when it began; g.mu is
// held.
func (g *Gateway) startAcquireLocked(s *session, name string, wait time.Duration) (*waiter, bool) {
	c := &g.cont
	h := g.holders[name]
	busy := h != nil && h.s != s
	if busy {
		g.countContendedLocked(name)
	}
	if wait <= 0 {
		return nil, busy
	}
	w := &waiter{lock: name, owner: s.owner, since: time.Now()}
	if c.waiters == nil {
		c.waiters = map[*waiter]struct{}{}
	}
	c.waiters[w] = struct{}{}
	return w, busy
}

// countContendedLocked counts an acquire that found name held.
func (g *Gateway) countContendedLocked(name string) {
	c := &g.cont
	if c.contended == nil {
		c.contended = map[string]uint64{}
	}
	if _, ok := c.contended[name]; ok || len(c.contended) < maxContended {
		c.contended[name]++
	}
}

// endAcquire records the outcome of an acquire of name begun by
// startAcquireLocked: granted, or refused because the lock was held.
func (g *Gateway) endAcquire(name string, w *waiter, busy, granted, refused bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := &g.cont
	if w != nil {
		delete(c.waiters, w)
	}
	if !granted {
		if refused && !busy {
			// Found held by a client of the lock service elsewhere.
			g.countContendedLocked(name)
		}
		return
	}
	c.acquires++
	if busy && w != nil {
		c.handoffs++
	}
	if w != nil {
		d := waitSample{lock: name, d: time.Since(w.since)}
		if len(c.waits) < waitSamples {
			c.waits = append(c.waits, d)
		} else {
			c.waits[c.waitNext] = d
			c.waitNext = (c.waitNext + 1) % waitSamples
		}
	}
}

// rejectLocked records a stale token refused; g.mu is held.
func (g *Gateway) rejectLocked(op, name string, tok uint64) {
	r := rejection{Op: op, Lock: name, Token: strconv.FormatUint(tok, 10), Time: time.Now().UTC()}
	if h := g.holders[name]; h != nil {
		r.Current = strconv.FormatUint(h.token, 10)
	}
	c := &g.cont
	if len(c.rejections) == rejectionsKept {
		c.rejections = append(c.rejections[:0], c.rejections[1:]...)
	}
	c.rejections = append(c.rejections, r)
}

// reject records a stale token refused.
func (g *Gateway) reject(op, name string, tok uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rejectLocked(op, name, tok)
}

// Contention returns how the locks held through g are fought over.
func (g *Gateway) Contention() Contention {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.contentionLocked(func(string) bool { return true })
}

// contentionLocked is Contention over the names may allows; g.mu is
// held.
func (g *Gateway) contentionLocked(may func(string) bool) Contention {
	c := &g.cont
	out := Contention{Acquires: c.acquires, Handoffs: c.handoffs}
	ws := make([]time.Duration, 0, len(c.waits)+len(c.waiters))
	for _, w := range c.waits {
		if may(w.lock) {
			ws = append(ws, w.d)
		}
	}
	now := time.Now()
	for w := range c.waiters {
		if may(w.lock) {
			ws = append(ws, now.Sub(w.since))
			out.Waiting++
		}
	}
	if n := len(ws); n > 0 {
		slices.Sort(ws)
		out.WaitP95 = ws[min(n-1, (n*95+99)/100-1)]
	}
	for k, n := range c.contended {
		if may(k) {
			out.Contended = append(out.Contended, KeyCount{Lock: k, Count: n})
		}
	}
	slices.SortFunc(out.Contended, func(a, b KeyCount) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Lock, b.Lock)
	})
	if len(out.Contended) > topContended {
		out.Contended = out.Contended[:topContended]
	}
	return out
}
