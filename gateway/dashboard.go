package gateway

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

// dashboardHTML is the page served at /: one file, its script and style
// inline, that reads GET /v1/dashboard and follows GET /v1/events.
//
//go:embed dashboard.html
var dashboardHTML []byte

// dashboardCSP allows the page's own inline script (by its hash, so that
// markup injected into the page could not run a script or an event
// handler), its inline style, and requests to this gateway only.
var dashboardCSP = func() string {
	s := string(dashboardHTML)
	i := strings.Index(s, "<script>")
	j := strings.Index(s, "</script>")
	if i < 0 || j < i {
		panic("gateway: dashboard.html has no script")
	}
	sum := sha256.Sum256([]byte(s[i+len("<script>") : j]))
	return "default-src 'none'; script-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) +
		"'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

func (g *Gateway) dashboardPage(w http.ResponseWriter, r *http.Request, _ *principal) *problem {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", dashboardCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	w.Write(dashboardHTML)
	return nil
}

type dashboardResponse struct {
	Time       time.Time            `json:"time"`
	EventID    string               `json:"event_id"` // resume GET /v1/events after it
	Admin      bool                 `json:"admin"`
	Locks      []dashboardLock      `json:"locks"`
	Waiters    []dashboardWaiter    `json:"waiters"`
	Sessions   []dashboardSession   `json:"sessions"`
	SessionsN  int                  `json:"sessions_total"`
	Contention dashboardContention  `json:"contention"`
	Ends       []dashboardFeedEvent `json:"ends"`
	Rejections []rejection          `json:"rejections"`
}

type dashboardLock struct {
	Lock           string     `json:"lock"`
	Token          string     `json:"token"`
	Owner          string     `json:"owner"`
	Since          time.Time  `json:"since"`
	Renewed        *time.Time `json:"renewed,omitempty"`
	TTLRemainingMS int64      `json:"ttl_remaining_ms"`
}

type dashboardWaiter struct {
	Lock   string    `json:"lock"`
	Owner  string    `json:"owner"`
	Since  time.Time `json:"since"`
	WaitMS int64     `json:"wait_ms"`
}

type dashboardSession struct {
	Owner          string `json:"owner"`
	Token          string `json:"token,omitempty"` // the name of the bearer token that created it
	TTLMS          int64  `json:"ttl_ms"`
	TTLRemainingMS int64  `json:"ttl_remaining_ms"`
	Locks          int    `json:"locks"`
	Waiting        int    `json:"waiting"`
}

type dashboardContention struct {
	Acquires  uint64          `json:"acquires"`
	Handoffs  uint64          `json:"handoffs"`
	WaitP95MS float64         `json:"wait_p95_ms"`
	Contended []contendedLock `json:"contended"`
}

type contendedLock struct {
	Lock  string `json:"lock"`
	Count uint64 `json:"count"`
}

type dashboardFeedEvent struct {
	ID string `json:"id"`
	feedEvent
}

// dashboard answers what the dashboard page shows, of the locks the
// caller may use: the locks held through this gateway, the acquires
// waiting, the sessions (the caller's, or all for an admin), contention,
// and the recent losses, forced releases and stale-token rejections.
func (g *Gateway) dashboard(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	now := time.Now()
	resp := dashboardResponse{Time: now.UTC(), Admin: p.admin, Locks: []dashboardLock{}, Waiters: []dashboardWaiter{},
		Sessions: []dashboardSession{}, Ends: []dashboardFeedEvent{}, Rejections: []rejection{}}
	g.mu.Lock()
	resp.EventID = g.eventID(g.feed.seq)
	held := make([]*held, 0, len(g.holders))
	for name, h := range g.holders {
		if p.may(name) {
			held = append(held, h)
		}
	}
	ss := make([]*session, 0)
	for _, s := range g.sessions {
		if p.admin || s.principal == p.name {
			ss = append(ss, s)
		}
	}
	for wt := range g.cont.waiters {
		if p.may(wt.lock) {
			resp.Waiters = append(resp.Waiters, dashboardWaiter{Lock: wt.lock, Owner: wt.owner, Since: wt.since.UTC(),
				WaitMS: now.Sub(wt.since).Milliseconds()})
		}
	}
	c := g.contentionLocked(p.may)
	for i := len(g.feed.ring) - 1; i >= 0 && len(resp.Ends) < recentEndsKept; i-- {
		e := g.feed.ring[i]
		if (e.Type == "lost" || e.Reason == "forced") && p.may(e.Lock) {
			resp.Ends = append(resp.Ends, dashboardFeedEvent{ID: g.eventID(e.seq), feedEvent: e})
		}
	}
	for i := len(g.cont.rejections) - 1; i >= 0; i-- {
		if x := g.cont.rejections[i]; p.may(x.Lock) {
			resp.Rejections = append(resp.Rejections, x)
		}
	}
	g.mu.Unlock()

	for _, h := range held {
		s := h.s
		s.mu.Lock()
		l := dashboardLock{Lock: h.name, Token: strconv.FormatUint(h.token, 10), Owner: s.owner, Since: h.since.UTC(),
			TTLRemainingMS: ms(s.lockLeftLocked(h))}
		s.mu.Unlock()
		if d, ok := h.lock.Deadline(); ok {
			// The session's Client sets the local deadline the usable
			// part of the TTL (its defaults: less the drift and the safety
			// margin) after sending the last confirmed renewal, or the
			// acquire, which was sent before h.since.
			usable := time.Duration(float64(s.ttl)*(1-distlock.DefaultDrift)) - distlock.DefaultSafetyMargin
			at := d.Add(-usable).UTC()
			if at.After(h.since) {
				l.Renewed = &at
			}
		}
		resp.Locks = append(resp.Locks, l)
	}
	slices.SortFunc(resp.Locks, func(a, b dashboardLock) int { return strings.Compare(a.Lock, b.Lock) })
	for _, s := range ss {
		s.mu.Lock()
		resp.Sessions = append(resp.Sessions, dashboardSession{Owner: s.owner, Token: s.principal, TTLMS: ms(s.ttl),
			TTLRemainingMS: ms(max(s.leftLocked(), 0)), Locks: len(s.locks), Waiting: len(s.pending)})
		s.mu.Unlock()
	}
	slices.SortFunc(resp.Sessions, func(a, b dashboardSession) int {
		if c := strings.Compare(a.Owner, b.Owner); c != 0 {
			return c
		}
		return b.Locks - a.Locks
	})
	slices.SortFunc(resp.Waiters, func(a, b dashboardWaiter) int {
		if c := strings.Compare(a.Lock, b.Lock); c != 0 {
			return c
		}
		return a.Since.Compare(b.Since)
	})
	resp.SessionsN = len(resp.Sessions)
	if len(resp.Sessions) > sessionsListed {
		resp.Sessions = resp.Sessions[:sessionsListed]
	}
	if len(resp.Waiters) > waitersListed {
		resp.Waiters = resp.Waiters[:waitersListed]
	}
	resp.Contention = dashboardContention{Acquires: c.Acquires, Handoffs: c.Handoffs,
		WaitP95MS: float64(c.WaitP95.Microseconds()) / 1000, Contended: []contendedLock{}}
	for _, k := range c.Contended {
		resp.Contention.Contended = append(resp.Contention.Contended, contendedLock{Lock: k.Lock, Count: k.Count})
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}
