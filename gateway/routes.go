package gateway

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// openAPI is the OpenAPI document of the API, served at /v1/openapi.json.
//
//go:embed openapi.json
var openAPI []byte

// handlerFunc is a route's handler; it answers, or returns the problem to
// answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request, p *principal) *problem

// route is one path of the API, with a handler per method.
type route struct {
	pattern string
	methods map[string]handlerFunc
	auth    bool
}

// routeTable is the API: every path, method and handler (the OpenAPI
// document lists the same, which a test checks).
func (g *Gateway) routeTable() []route {
	return []route{
		{"/v1/sessions", map[string]handlerFunc{"POST": g.createSession}, true},
		{"/v1/sessions/{id}", map[string]handlerFunc{"DELETE": g.deleteSession}, true},
		{"/v1/sessions/{id}/keepalive", map[string]handlerFunc{"POST": g.keepalive}, true},
		{"/v1/locks", map[string]handlerFunc{"GET": g.list}, true},
		{"/v1/locks/{name}", map[string]handlerFunc{"GET": g.lockState}, true},
		{"/v1/locks/{name}/acquire", map[string]handlerFunc{"POST": g.acquire}, true},
		{"/v1/locks/{name}/release", map[string]handlerFunc{"POST": g.release}, true},
		{"/v1/locks/{name}/abandon", map[string]handlerFunc{"POST": g.abandon}, true},
		{"/v1/locks/{name}/check", map[string]handlerFunc{"POST": g.check}, true},
		{"/v1/locks/{name}/owner", map[string]handlerFunc{"POST": g.setOwner}, true},
		{"/v1/elections/{name}/campaign", map[string]handlerFunc{"POST": g.campaign}, true},
		{"/v1/elections/{name}/leader", map[string]handlerFunc{"GET": g.leader}, true},
		{"/v1/elections/{name}/observe", map[string]handlerFunc{"GET": g.observe}, true},
		{"/v1/elections/{name}/proclaim", map[string]handlerFunc{"POST": g.proclaim}, true},
		{"/v1/elections/{name}/resign", map[string]handlerFunc{"POST": g.resign}, true},
		{"/v1/semaphores/{name}", map[string]handlerFunc{"GET": g.permits}, true},
		{"/v1/semaphores/{name}/acquire", map[string]handlerFunc{"POST": g.acquirePermit}, true},
		{"/v1/events", map[string]handlerFunc{"GET": g.events}, true},
		{"/v1/openapi.json", map[string]handlerFunc{"GET": g.openapi}, false},
		{"/healthz", map[string]handlerFunc{"GET": g.healthz}, false},
		{"/metrics", map[string]handlerFunc{"GET": g.metrics}, true},
		{"/v1/dashboard", map[string]handlerFunc{"GET": g.dashboard}, true},
		{"/", map[string]handlerFunc{"GET": g.dashboardPage}, false},
	}
}

// routes is the router of routeTable.
func (g *Gateway) routes() *http.ServeMux {
	table := g.routeTable()
	mux := http.NewServeMux()
	g.nameOps = map[string]map[string]http.Handler{lockPrefix: {}, electionPrefix: {}}
	for _, rt := range table {
		named := false
		for prefix, ops := range g.nameOps {
			if rt.pattern == prefix+"{name}" {
				ops[""], named = g.serveRoute(rt), true
			} else if op, ok := strings.CutPrefix(rt.pattern, prefix+"{name}/"); ok {
				// The router unescapes a path before it cleans it, so it
				// cannot route a name such as "/" or "a//b": nameRoute
				// does.
				ops[op], named = g.serveRoute(rt), true
			}
		}
		if named {
			continue
		}
		pattern := rt.pattern
		if pattern == "/" {
			pattern = "/{$}" // the dashboard page; other paths are not found
		}
		mux.Handle(pattern, g.serveRoute(rt))
	}
	mux.Handle("/", g.serveRoute(route{pattern: "/", methods: map[string]handlerFunc{}}))
	return mux
}

// The paths of the routes of a lock and of an election, before the name.
const (
	lockPrefix     = "/v1/locks/"
	electionPrefix = "/v1/elections/"
)

// nameRoute finds the handler of a lock's or an election's route,
// /v1/locks/NAME/OP, /v1/locks/NAME or /v1/elections/NAME/OP with NAME
// percent-encoded, and sets the name as the path value "name".
func (g *Gateway) nameRoute(r *http.Request) http.Handler {
	var rest, prefix string
	for p := range g.nameOps {
		if x, ok := strings.CutPrefix(r.URL.EscapedPath(), p); ok {
			rest, prefix = x, p
		}
	}
	if prefix == "" {
		return nil
	}
	i := strings.LastIndexByte(rest, '/')
	op := ""
	if i < 0 {
		i = len(rest) // GET /v1/locks/NAME
	} else {
		op = rest[i+1:]
	}
	h := g.nameOps[prefix][op]
	if h == nil {
		return nil
	}
	if strings.Contains(rest[:i], "/") {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeProblem(w, newProblem(http.StatusBadRequest, ProblemBadName, `a name is one path segment: percent-encode "/" in it as %2F`))
		})
	}
	name, err := url.PathUnescape(rest[:i])
	if err != nil {
		return nil
	}
	r.SetPathValue("name", name)
	return h
}

// statusWriter remembers the status code, for the log and the metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveRoute authenticates, dispatches by method, answers problems, and
// logs and counts the request. The log names the route pattern, never the
// path (it holds session ids) nor any header.
func (g *Gateway) serveRoute(rt route) http.Handler {
	allow := slices.Sorted(func(yield func(string) bool) {
		for m := range rt.methods {
			if !yield(m) {
				return
			}
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		who := ""
		pr := func() *problem {
			h, ok := rt.methods[r.Method]
			switch {
			case len(rt.methods) == 0:
				return newProblem(http.StatusNotFound, ProblemNotFound, "no such route: see /v1/openapi.json")
			case !ok:
				sw.Header().Set("Allow", strings.Join(allow, ", "))
				return newProblem(http.StatusMethodNotAllowed, ProblemMethodNotAllowed,
					fmt.Sprintf("%s takes %s", rt.pattern, strings.Join(allow, ", ")))
			}
			p := g.anyone
			if rt.auth && g.cfg.tokens != nil {
				var pr *problem
				if p, pr = g.cfg.tokens.authenticate(r); pr != nil {
					return pr
				}
				who = p.name
			}
			return h(sw, r, p)
		}()
		if pr != nil {
			writeProblem(sw, pr)
		}
		if sw.status == 0 {
			sw.status = 499 // the client went away before an answer
		}
		g.inst.requests.Add(context.Background(), 1, metric.WithAttributes(
			attribute.String("route", rt.pattern), attribute.Int("status", sw.status)))
		g.cfg.logger.Debug("gateway: request", "method", r.Method, "route", rt.pattern,
			"status", sw.status, "token", who, "took", time.Since(start))
	})
}

// durationJSON is a duration in JSON: a string such as "15s", or a number
// of seconds. It is checked by the handler, which knows the field and its
// range: decoding never fails, so that the answer can say which field is
// wrong, and how, rather than that the JSON is malformed.
type durationJSON struct {
	d    time.Duration // clamped to the range of time.Duration (see parseDuration)
	sent string        // the JSON value as sent, for errors
	bad  bool          // not a duration
}

func (d *durationJSON) UnmarshalJSON(b []byte) error {
	d.sent = string(b)
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := parseDuration(s)
		d.d, d.bad = v, err != nil
		return nil
	}
	// A JSON number is valid input to ParseFloat; one too large for a
	// float64 is ±Inf with ErrRange, which seconds clamps.
	n, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		d.bad = true
		return nil
	}
	d.d = seconds(n)
	return nil
}

// shown is the value sent, shortened, for an error. (Only a value that
// was read, out of range, is shown: ASCII, never cut within a character.)
func (d *durationJSON) shown() string {
	if len(d.sent) > maxQuoted {
		return d.sent[:maxQuoted] + "..."
	}
	return d.sent
}

type createSessionRequest struct {
	Owner string        `json:"owner"`
	TTL   *durationJSON `json:"ttl"`
}

type sessionResponse struct {
	ID             string `json:"id"`
	Owner          string `json:"owner"`
	TTLMS          int64  `json:"ttl_ms"`
	TTLRemainingMS int64  `json:"ttl_remaining_ms"`
}

func (g *Gateway) createSession(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	var req createSessionRequest
	if pr := readJSON(r, &req); pr != nil {
		return pr
	}
	ttl := distlock.DefaultTTL
	if t := req.TTL; t != nil {
		switch {
		case t.bad:
			return newProblem(http.StatusBadRequest, ProblemBadRequest,
				`ttl must be a duration such as "15s", or a number of seconds`)
		case t.d > g.cfg.maxTTL:
			return newProblem(http.StatusBadRequest, ProblemBadTTL,
				fmt.Sprintf("ttl %s is above the maximum, %v", t.shown(), g.cfg.maxTTL))
		case t.d < g.cfg.minTTL:
			return newProblem(http.StatusBadRequest, ProblemBadTTL,
				fmt.Sprintf("ttl %s is below the minimum, %v", t.shown(), g.cfg.minTTL))
		}
		ttl = t.d
	}
	s, pr := g.newSession(req.Owner, ttl, p)
	if pr != nil {
		return pr
	}
	w.Header().Set("Location", "/v1/sessions/"+s.id)
	writeJSON(w, http.StatusCreated, sessionResponse{ID: s.id, Owner: s.owner, TTLMS: ms(s.ttl), TTLRemainingMS: ms(s.ttl)})
	return nil
}

func (g *Gateway) deleteSession(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	s, pr := g.lookup(r.PathValue("id"), p)
	if pr != nil {
		return pr
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), releaseTimeout)
	defer cancel()
	if err := g.endSession(ctx, s, endDeleted); err != nil {
		g.cfg.logger.Warn("gateway: releasing the locks of a deleted session", "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type lockState struct {
	Lock           string `json:"lock"`
	Token          string `json:"token"`
	Shared         bool   `json:"shared,omitempty"`
	TTLRemainingMS int64  `json:"ttl_remaining_ms"`
}

type keepaliveResponse struct {
	TTLRemainingMS int64       `json:"ttl_remaining_ms"`
	Events         []event     `json:"events"`
	EventsDropped  int         `json:"events_dropped,omitempty"`
	Locks          []lockState `json:"locks"`
	Superseded     bool        `json:"superseded,omitempty"`
}

func (g *Gateway) keepalive(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	s, pr := g.lookup(r.PathValue("id"), p)
	if pr != nil {
		return pr
	}
	wait, pr := waitParam(r, g.cfg.maxWait)
	if pr != nil {
		return pr
	}
	if !s.enter() {
		return sessionEnded()
	}
	defer s.leave()
	if wait > 0 {
		end, pr := g.startWait(p)
		if pr != nil {
			return pr
		}
		defer end()
	}
	s.mu.Lock()
	s.poll++
	gen := s.poll
	s.wakeLocked() // an older keepalive returns now
	s.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	timedOut := wait == 0
	for {
		s.mu.Lock()
		if s.ended != "" {
			s.mu.Unlock()
			return sessionEnded()
		}
		if len(s.events) > 0 || gen != s.poll || timedOut {
			resp := keepaliveResponse{TTLRemainingMS: ms(s.leftLocked()), Events: []event{}, Locks: []lockState{},
				Superseded: gen != s.poll}
			if !resp.Superseded {
				resp.Events, s.events = append(resp.Events, s.events...), nil
				resp.EventsDropped, s.dropped = s.dropped, 0
			}
			for _, h := range s.locks {
				resp.Locks = append(resp.Locks, lockState{Lock: h.name, Token: strconv.FormatUint(h.token, 10),
					Shared: h.shared, TTLRemainingMS: ms(s.lockLeftLocked(h))})
			}
			s.mu.Unlock()
			slices.SortFunc(resp.Locks, func(a, b lockState) int { return strings.Compare(a.Lock, b.Lock) })
			writeJSON(w, http.StatusOK, resp)
			return nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			timedOut = true
		case <-r.Context().Done():
			return nil // the client went away
		}
	}
}

func sessionEnded() *problem {
	return newProblem(http.StatusNotFound, ProblemSessionNotFound, "the session ended")
}

type acquireRequest struct {
	Session string `json:"session"`
	Shared  bool   `json:"shared"` // a shared (read) lock
}

type grantResponse struct {
	Lock           string `json:"lock"`
	Token          string `json:"token"`
	Shared         bool   `json:"shared,omitempty"`
	TTLRemainingMS int64  `json:"ttl_remaining_ms"`
}

type holder struct {
	Token   string     `json:"token,omitempty"`
	Owner   string     `json:"owner,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
	Expires *time.Time `json:"expires,omitempty"`
}

func (g *Gateway) acquire(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	var req acquireRequest
	name, pr := lockRequest(r, p, &req)
	if pr != nil {
		return pr
	}
	wait, pr := waitParam(r, g.cfg.maxWait)
	if pr != nil {
		return pr
	}
	s, pr := g.lookup(req.Session, p)
	if pr != nil {
		return pr
	}
	if !s.enter() {
		return sessionEnded()
	}
	defer s.leave()
	if wait > 0 {
		end, pr := g.startWait(p)
		if pr != nil {
			return pr
		}
		defer end()
	}
	h, err := s.acquire(r.Context(), name, wait, candidacy{shared: req.Shared})
	switch {
	case err == nil:
	case errors.Is(err, errSessionEnded):
		return sessionEnded()
	case errors.Is(err, errHeldOtherwise):
		return heldOtherwise(s, name, req.Shared)
	case errors.Is(err, errTooManyLocks):
		return g.sessionLimit("locks")
	case r.Context().Err() != nil:
		return nil // the client went away
	case req.Shared && errors.Is(err, errors.ErrUnsupported):
		return newProblem(http.StatusNotImplemented, ProblemUnsupported, "the lock service cannot grant shared locks")
	case errors.Is(err, errNotAcquired), errors.Is(err, distlock.ErrNotAcquired):
		what := "held by another"
		if req.Shared {
			what = "held by a writer, or awaited by one"
		}
		pr := newProblem(http.StatusConflict, ProblemNotAcquired, fmt.Sprintf("lock %s is %s", quoteName(name), what))
		pr.Holder, _ = g.holderOf(r.Context(), name)
		return pr
	case errors.Is(err, distlock.ErrInvalidKey):
		return newProblem(http.StatusBadRequest, ProblemBadName, strings.TrimPrefix(err.Error(), "distlock: "))
	default:
		return g.backendProblem(err)
	}
	s.mu.Lock()
	in := s.locks[name] == h
	left := s.lockLeftLocked(h)
	s.mu.Unlock()
	if !in || left <= 0 {
		return newProblem(http.StatusConflict, ProblemLockLost, "the grant was lost before it could be answered")
	}
	writeJSON(w, http.StatusOK, grantResponse{Lock: name, Token: strconv.FormatUint(h.token, 10), Shared: h.shared,
		TTLRemainingMS: ms(left)})
	return nil
}

// heldOtherwise answers an acquire of name, shared or not, that s holds
// as another kind of grant.
func heldOtherwise(s *session, name string, shared bool) *problem {
	s.mu.Lock()
	h := s.locks[name]
	s.mu.Unlock()
	var detail string
	switch {
	case h != nil && h.shared:
		detail = fmt.Sprintf("the session holds %s as a shared lock, which cannot be upgraded: release it first", quoteName(name))
	case h != nil && h.kind() == "lock" && shared:
		detail = fmt.Sprintf("the session holds %s as an exclusive lock, not as a shared one: release it first", quoteName(name))
	default:
		detail = fmt.Sprintf("the session holds %s as its term of an election (resign it there) or as a permit, not as a lock", quoteName(name))
	}
	return newProblem(http.StatusConflict, ProblemNotAcquired, detail)
}

// backendProblem answers an error of the lock service.
func (g *Gateway) backendProblem(err error) *problem {
	if errors.Is(err, distlock.ErrUnavailable) {
		pr := newProblem(http.StatusServiceUnavailable, ProblemUnavailable, "the lock service is unavailable")
		pr.retryAfter = 1
		return pr
	}
	g.cfg.logger.Error("gateway: lock service", "err", err)
	return newProblem(http.StatusInternalServerError, ProblemInternal, "the lock service failed")
}

// holderOf describes the holder of name, if the gateway or the lock
// service can tell; known reports whether it could tell, holder or not.
// A listing that failed in part (another name's lock entry could not be
// read) still tells a holder it found, and nothing else.
func (g *Gateway) holderOf(ctx context.Context, name string) (hd *holder, known bool) {
	g.mu.Lock()
	h := g.holders[name]
	g.mu.Unlock()
	if h != nil {
		since := h.since
		return &holder{Token: strconv.FormatUint(h.token, 10), Owner: h.ownerName(), Since: &since}, true
	}
	if g.lister == nil {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	hs, err := g.lister.List(ctx, name)
	x, found := holderIn(hs, name)
	if !found {
		return nil, err == nil
	}
	hd = &holder{Token: strconv.FormatUint(x.Token, 10), Owner: x.Owner}
	if !x.Since.IsZero() {
		hd.Since = &x.Since
	}
	if !x.Expires.IsZero() {
		hd.Expires = &x.Expires
	}
	return hd, true
}

type releaseRequest struct {
	Session string `json:"session"`
	Token   string `json:"token"`
	Force   bool   `json:"force"`
}

type releaseResponse struct {
	Released bool     `json:"released"`
	Token    string   `json:"token"`
	Tokens   []string `json:"tokens,omitempty"` // a forced release without a token: every grant released, the shared ones by token
}

func (g *Gateway) release(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	var req releaseRequest
	name, pr := lockRequest(r, p, &req)
	if pr != nil {
		return pr
	}
	var tok uint64
	if req.Token != "" || !req.Force {
		if tok, pr = parseToken(req.Token); pr != nil {
			return pr
		}
	}
	var h *held
	if req.Force {
		switch {
		case !p.admin && g.cfg.tokens == nil:
			return newProblem(http.StatusForbidden, ProblemForbidden,
				"a forced release needs an admin token, and this gateway has none: its operator may allow forced releases to every local user (distlock serve --allow-force-release)")
		case !p.admin:
			return newProblem(http.StatusForbidden, ProblemForbidden, "a forced release needs a token with the admin scope")
		}
		g.mu.Lock()
		h = g.holders[name]
		readers := g.readersLocked(name)
		g.mu.Unlock()
		switch i := slices.IndexFunc(readers, func(r *held) bool { return r.token == tok }); {
		case h != nil:
		case tok == 0 && len(readers) > 0:
			return g.forceReaders(w, r, name, readers)
		case i >= 0:
			h = readers[i] // the shared lock named by its token
		case tok != 0 && len(readers) > 0:
			g.reject("release", name, tok)
			return newProblem(http.StatusConflict, ProblemNotHeld,
				fmt.Sprintf("token %d is none of the shared locks of %s held through this gateway: nothing was released", tok, quoteName(name)))
		}
		if h == nil {
			return newProblem(http.StatusConflict, ProblemNotHeld,
				fmt.Sprintf("no session of this gateway holds lock %s", quoteName(name)))
		}
	} else {
		s, pr := g.lookup(req.Session, p)
		if pr != nil {
			return pr
		}
		s.mu.Lock()
		h = s.locks[name]
		s.mu.Unlock()
		if h == nil {
			return newProblem(http.StatusConflict, ProblemNotHeld,
				fmt.Sprintf("the session does not hold lock %s (released, lost, or never acquired)", quoteName(name)))
		}
	}
	if tok != 0 && h.token != tok {
		g.reject("release", name, tok)
		return newProblem(http.StatusConflict, ProblemNotHeld,
			fmt.Sprintf("token %d is not the session's grant of lock %s: the lock was not released", tok, quoteName(name)))
	}
	why, reason := "released", "by_holder"
	if req.Force {
		why, reason = "forced", "forced"
	}
	if !h.s.drop(h, why, "") {
		return newProblem(http.StatusConflict, ProblemNotHeld, "the lock was released or lost meanwhile")
	}
	if g.dropped != nil {
		g.dropped()
	}
	switch err := g.giveBack(r, h, reason); {
	case err == nil:
	case errors.Is(err, distlock.ErrLockLost):
		return newProblem(http.StatusConflict, ProblemLockLost, "the lock had been lost before the release: "+
			strings.TrimPrefix(err.Error(), "distlock: "))
	default:
		return g.backendProblem(err)
	}
	writeJSON(w, http.StatusOK, releaseResponse{Released: true, Token: strconv.FormatUint(h.token, 10)})
	return nil
}

// forceReaders is the forced release of the shared locks of name held
// through this gateway, readers, when no token names one of them: it
// releases each, and answers their tokens, the first as the token. When
// the lock service fails to release some, the answer is the problem of
// the failure (see backendProblem) naming the tokens released
// (released_tokens) and those that failed (failed_tokens): each was
// taken from its session all the same, and the lock service may keep it
// until its lease runs out.
func (g *Gateway) forceReaders(w http.ResponseWriter, r *http.Request, name string, readers []*held) *problem {
	resp := releaseResponse{Released: true, Tokens: []string{}}
	var failed error
	var failedTokens []string
	for _, h := range readers {
		if !h.s.drop(h, "forced", "") {
			continue // released or lost meanwhile
		}
		tok := strconv.FormatUint(h.token, 10)
		switch err := g.giveBack(r, h, "forced"); {
		case err == nil, errors.Is(err, distlock.ErrLockLost):
			resp.Tokens = append(resp.Tokens, tok)
		default:
			failed = cmp.Or(failed, err)
			failedTokens = append(failedTokens, tok)
		}
	}
	switch {
	case failed != nil:
		pr := g.backendProblem(failed)
		n := len(resp.Tokens) + len(failedTokens)
		pr.Detail = fmt.Sprintf("%d of the %d shared locks of %s were released; the release of %d failed (%s): "+
			"they were taken from their sessions, and the lock service may keep them until their leases run out (tokens %s)",
			len(resp.Tokens), n, quoteName(name), len(failedTokens), pr.Detail, strings.Join(failedTokens, ", "))
		pr.ReleasedTokens, pr.FailedTokens = &resp.Tokens, failedTokens
		return pr
	case len(resp.Tokens) == 0:
		return newProblem(http.StatusConflict, ProblemNotHeld, "the shared locks were released or lost meanwhile")
	}
	resp.Token = resp.Tokens[0]
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// lockRequest reads the lock name of a request to one of a lock's
// routes, checks that p may use it, and reads the JSON body into req.
func lockRequest(r *http.Request, p *principal, req any) (string, *problem) {
	name, pr := lockName(r)
	if pr != nil {
		return "", pr
	}
	if !p.may(name) {
		return "", p.forbidden(name)
	}
	if pr := readJSON(r, req); pr != nil {
		return "", pr
	}
	return name, nil
}

type abandonRequest struct {
	Session string `json:"session"`
}

// abandon is the end of an acquirer that gave up: it ends the session's
// acquire of name still in progress and releases whatever grant of name
// the session has, whatever its token, so that a grant made as the
// acquirer gave up (its answer never read) is nobody's for no time. It
// answers 204 once nothing of the session is pending or held on name.
func (g *Gateway) abandon(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	var req abandonRequest
	name, pr := lockRequest(r, p, &req)
	if pr != nil {
		return pr
	}
	s, pr := g.lookup(req.Session, p)
	if pr != nil {
		return pr
	}
	h, ok := s.abandon(r.Context(), name)
	if !ok {
		return newProblem(http.StatusServiceUnavailable, ProblemUnavailable, "the acquire in progress did not end in time")
	}
	if h != nil && h.s.drop(h, "released", "") {
		if err := g.giveBack(r, h, "abandoned"); err != nil && !errors.Is(err, distlock.ErrLockLost) {
			return g.backendProblem(err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// giveBack releases h, which its session dropped, at the lock service,
// within releaseTimeout whatever the request's context, and publishes the
// outcome: released (for reason), or lost. It returns the service's
// answer.
func (g *Gateway) giveBack(r *http.Request, h *held, reason string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), releaseTimeout)
	defer cancel()
	err := h.lock.Release(ctx)
	switch {
	case err == nil:
		g.publish("released", h, reason)
	case errors.Is(err, distlock.ErrLockLost):
		g.publish("lost", h, "lost")
	}
	return err
}

type ownerRequest struct {
	Session string  `json:"session"`
	Token   string  `json:"token"`
	Owner   *string `json:"owner"`
}

type ownerResponse struct {
	Lock  string `json:"lock"`
	Token string `json:"token"`
	Owner string `json:"owner"`
}

// setOwner replaces the owner of the session's lock with the token sent,
// at the lock service (distlock.Lock.SetOwner), and publishes an owner
// event. It is owner-checked: a token that is not the session's grant of
// the lock changes nothing. A term's value changes with proclaim.
func (g *Gateway) setOwner(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	var req ownerRequest
	name, pr := lockRequest(r, p, &req)
	if pr != nil {
		return pr
	}
	tok, pr := parseToken(req.Token)
	if pr != nil {
		return pr
	}
	if req.Owner == nil {
		return newProblem(http.StatusBadRequest, ProblemBadRequest, "owner is required")
	}
	if pr := checkOwner(*req.Owner); pr != nil {
		return pr
	}
	s, pr := g.lookup(req.Session, p)
	if pr != nil {
		return pr
	}
	s.mu.Lock()
	h := s.locks[name]
	s.mu.Unlock()
	switch {
	case h == nil:
		return newProblem(http.StatusConflict, ProblemNotHeld,
			fmt.Sprintf("the session does not hold lock %s (released, lost, or never acquired): nothing was changed", quoteName(name)))
	case h.term != nil:
		return newProblem(http.StatusConflict, ProblemNotHeld,
			fmt.Sprintf("the session holds %s as a term of an election: proclaim its value", quoteName(name)))
	case h.token != tok:
		g.reject("set owner", name, tok)
		return newProblem(http.StatusConflict, ProblemNotHeld,
			fmt.Sprintf("token %d is not the session's grant of lock %s: nothing was changed", tok, quoteName(name)))
	}
	l, ok := h.lock.(*distlock.Lock)
	if !ok { // (a lock that is not a term is a *distlock.Lock)
		return newProblem(http.StatusInternalServerError, ProblemInternal, "the grant is not a lock")
	}
	ctx, cancel := context.WithTimeout(r.Context(), releaseTimeout)
	defer cancel()
	h.ownerMu.Lock()
	defer h.ownerMu.Unlock()
	switch err := l.SetOwner(ctx, *req.Owner); {
	case err == nil:
	case errors.Is(err, distlock.ErrLockLost), errors.Is(err, distlock.ErrNotHeld):
		return newProblem(http.StatusConflict, ProblemLockLost, "the lock ended before its owner could be changed: nothing was changed")
	case errors.Is(err, errors.ErrUnsupported):
		return newProblem(http.StatusNotImplemented, ProblemUnsupported, "the lock service cannot change the owner of a held lock")
	case r.Context().Err() != nil:
		return nil // the client went away
	default:
		return g.backendProblem(err)
	}
	g.ownerChanged(h, *req.Owner)
	writeJSON(w, http.StatusOK, ownerResponse{Lock: name, Token: strconv.FormatUint(h.token, 10), Owner: *req.Owner})
	return nil
}

// ownerChanged records owner as h's, which the lock service has now, and
// publishes an owner event unless h was released meanwhile (its release
// is then the last event); h.ownerMu is held.
func (g *Gateway) ownerChanged(h *held, owner string) {
	h.owner.Store(&owner)
	g.mu.Lock()
	defer g.mu.Unlock()
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	if h.s.locks[h.name] == h {
		g.publishLocked("owner", h, "")
	}
}

type checkRequest struct {
	Token string `json:"token"`
}

type checkResponse struct {
	// Current: the token is the exclusive grant's, the one a store
	// fencing writes admits. A reader's token is never current, so that a
	// client reading this field alone fails closed.
	Current bool `json:"current"`
	// Reader: the token is a live shared (read) lock's (a sequencer names
	// its lock's mode): a reader validating its read looks here.
	Reader bool `json:"reader,omitempty"`
}

// check is the sequencer check: is token the current grant of name?
func (g *Gateway) check(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	var req checkRequest
	name, pr := lockRequest(r, p, &req)
	if pr != nil {
		return pr
	}
	tok, pr := parseToken(req.Token)
	if pr != nil {
		return pr
	}
	g.mu.Lock()
	h := g.holders[name]
	readers := g.readersLocked(name)
	g.mu.Unlock()
	if h != nil && h.lock.Err() == nil {
		// An exclusive holder here: no other grant of name is live.
		if h.token != tok {
			g.reject("check", name, tok)
		}
		writeJSON(w, http.StatusOK, checkResponse{Current: h.token == tok})
		return nil
	}
	if slices.ContainsFunc(readers, func(r *held) bool { return r.token == tok && r.lock.Err() == nil }) {
		writeJSON(w, http.StatusOK, checkResponse{Reader: true}) // a live shared lock of name
		return nil
	}
	if g.lister == nil {
		return newProblem(http.StatusNotImplemented, ProblemUnsupported,
			"the lock is not held through this gateway and the lock service cannot list holders")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	// A listing that failed in part answers if it found the holder: the
	// entries it could not read are other names'.
	hs, err := g.lister.List(ctx, name)
	i := slices.IndexFunc(hs, func(x driver.Holder) bool { return x.Key == name && x.Token == tok })
	if err != nil && i < 0 {
		return g.backendProblem(err)
	}
	if i >= 0 && hs[i].Shared {
		writeJSON(w, http.StatusOK, checkResponse{Reader: true})
		return nil
	}
	current := i >= 0
	if !current {
		g.reject("check", name, tok)
	}
	writeJSON(w, http.StatusOK, checkResponse{Current: current})
	return nil
}

func (g *Gateway) openapi(w http.ResponseWriter, r *http.Request, _ *principal) *problem {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
	return nil
}

func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request, _ *principal) *problem {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return closingProblem()
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// bodyTimeout bounds the reading of a request body.
func (g *Gateway) bodyTimeout() time.Duration { return min(bodyTimeout, 2*g.cfg.headerTimeout) }

func (g *Gateway) metrics(w http.ResponseWriter, r *http.Request, _ *principal) *problem {
	if g.cfg.metrics == nil {
		return newProblem(http.StatusNotImplemented, ProblemUnsupported, "this gateway exports no metrics (WithMetricsHandler)")
	}
	g.cfg.metrics.ServeHTTP(w, r)
	return nil
}
