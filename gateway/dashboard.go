package gateway

import (
	"cmp"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
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
	Time         time.Time            `json:"time"`
	EventID      string               `json:"event_id"` // resume GET /v1/events after it
	Service      dashboardService     `json:"service"`
	Tokens       bool                 `json:"tokens"` // the gateway needs bearer tokens
	Admin        bool                 `json:"admin"`  // the caller may force releases
	Locks        []dashboardLock      `json:"locks"`
	Waiters      []dashboardWaiter    `json:"waiters"`
	WaitersTotal int                  `json:"waiters_total"`
	Sessions     []dashboardSession   `json:"sessions"`
	SessionsN    int                  `json:"sessions_total"`
	Contention   dashboardContention  `json:"contention"`
	Ends         []dashboardFeedEvent `json:"ends"`
	Rejections   []rejection          `json:"rejections"`
}

// dashboardService is what the dashboard says of the lock service.
type dashboardService struct {
	Kind string `json:"kind"`          // the URL's scheme, or the backend's package
	URL  string `json:"url,omitempty"` // redacted (driver.Redact)
}

// describeService describes b, opened from rawURL if not "".
func describeService(b driver.Backend, rawURL string) dashboardService {
	if rawURL != "" {
		shown := driver.Redact(rawURL)
		if scheme, _, ok := driver.Scheme(shown); ok {
			return dashboardService{Kind: scheme, URL: shown}
		}
		return dashboardService{Kind: "unknown", URL: shown}
	}
	t := reflect.TypeOf(b)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	kind := path.Base(t.PkgPath())
	if kind == "." || kind == "/" {
		kind = t.Name()
	}
	return dashboardService{Kind: kind}
}

type dashboardLock struct {
	Lock    string     `json:"lock"`
	Token   string     `json:"token"`
	Owner   string     `json:"owner"`
	Since   time.Time  `json:"since"`
	Renewed *time.Time `json:"renewed,omitempty"` // the last renewal confirmed since the grant, if any
	// TTLRemainingMS is what the gateway vouches for: the lesser of the
	// lease's and the session's time left.
	TTLRemainingMS int64 `json:"ttl_remaining_ms"`
	// LeaseRemainingMS is the time left to the lock's local deadline; nil
	// when the lock has no lease, and lasts as long as the gateway's
	// connection or lock file (PostgreSQL session locks, file://).
	LeaseRemainingMS   *int64 `json:"lease_remaining_ms"`
	SessionRemainingMS int64  `json:"session_remaining_ms"`
	SessionTTLMS       int64  `json:"session_ttl_ms"`
	AtRisk             bool   `json:"at_risk"`  // no renewal confirmed in time: see distlock.Lock.AtRisk
	Expiring           bool   `json:"expiring"` // its session has less than a third of its TTL left
	Waiting            int    `json:"waiting"`  // acquires waiting for it through this gateway
	// Shared: a shared (read) lock of the name, one entry per reader (by
	// token, after the name's exclusive holder if any), and Readers the
	// count of the name's shared locks held through this gateway.
	Shared  bool `json:"shared,omitempty"`
	Readers int  `json:"readers,omitempty"`
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
	Waiting   int             `json:"waiting"` // acquires waiting now, counted in the p95 with their wait so far
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
// caller may use: the lock service, the locks held through this gateway,
// the acquires waiting, the sessions (the caller's, or all for an admin),
// contention, and the recent losses, forced releases and stale-token
// rejections.
func (g *Gateway) dashboard(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	now := time.Now()
	resp := dashboardResponse{Time: now.UTC(), Service: g.service, Tokens: g.cfg.tokens != nil, Admin: p.admin,
		Locks: []dashboardLock{}, Waiters: []dashboardWaiter{},
		Sessions: []dashboardSession{}, Ends: []dashboardFeedEvent{}, Rejections: []rejection{}}
	waiting := map[string]int{}
	g.mu.Lock()
	resp.EventID = g.eventID(g.feed.seq)
	held := make([]*held, 0, len(g.holders))
	for name, h := range g.holders {
		if p.may(name) {
			held = append(held, h)
		}
	}
	readers := map[string]int{}
	for name := range g.readers {
		if p.may(name) {
			rs := g.readersLocked(name)
			held = append(held, rs...)
			readers[name] = len(rs)
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
			waiting[wt.lock]++
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
		l := dashboardLockOf(h, waiting[h.name])
		if h.shared {
			l.Shared, l.Readers = true, readers[h.name]
		}
		resp.Locks = append(resp.Locks, l)
	}
	// By name; a name's exclusive holder first, then its readers by token.
	slices.SortFunc(resp.Locks, func(a, b dashboardLock) int {
		return cmp.Or(strings.Compare(a.Lock, b.Lock), cmp.Compare(boolInt(a.Shared), boolInt(b.Shared)),
			cmp.Compare(len(a.Token), len(b.Token)), strings.Compare(a.Token, b.Token))
	})
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
	resp.WaitersTotal = len(resp.Waiters)
	if len(resp.Waiters) > waitersListed {
		resp.Waiters = resp.Waiters[:waitersListed]
	}
	resp.Contention = dashboardContention{Acquires: c.Acquires, Handoffs: c.Handoffs,
		WaitP95MS: float64(c.WaitP95.Microseconds()) / 1000, Waiting: c.Waiting, Contended: []contendedLock{}}
	for _, k := range c.Contended {
		resp.Contention.Contended = append(resp.Contention.Contended, contendedLock{Lock: k.Lock, Count: k.Count})
	}
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// dashboardLockOf is what the dashboard shows of h, for which waiting
// acquires wait.
func dashboardLockOf(h *held, waiting int) dashboardLock {
	s := h.s
	s.mu.Lock()
	sessionLeft := max(s.leftLocked(), 0)
	l := dashboardLock{Lock: h.name, Token: strconv.FormatUint(h.token, 10), Owner: h.ownerName(), Since: h.since.UTC(),
		TTLRemainingMS: ms(s.lockLeftLocked(h)), SessionRemainingMS: ms(sessionLeft), SessionTTLMS: ms(s.ttl),
		Expiring: sessionLeft < s.ttl/3, Waiting: waiting}
	s.mu.Unlock()
	if d, ok := h.lock.Deadline(); ok {
		left := ms(max(time.Until(d), 0))
		l.LeaseRemainingMS = &left
		// The Client sets the deadline from the send of each confirmed
		// request and the lease the service granted (etcd's whole
		// seconds, 5/12 of ZooKeeper's session timeout, Redlock's validity), the
		// same for each renewal as for the grant: the last renewal was
		// confirmed about h.lease before the deadline, as the grant was,
		// give or take a round trip. Compared on the monotonic clock, which
		// UTC strips: without a renewal at is h.since exactly, which its
		// wall reading need not be.
		if at := d.Add(-h.lease); at.After(h.since) {
			at = at.UTC()
			l.Renewed = &at
		}
	}
	select {
	case <-h.lock.AtRisk():
		l.AtRisk = h.lock.Err() == nil
	default:
	}
	return l
}
