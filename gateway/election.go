package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
)

// maxValue bounds a leader's value sent to the gateway, in bytes.
const maxValue = 1024

// The elections' routes. An election is package election's, over the
// session's Client: a campaign is an acquire of the election's key (see
// election.KeyPrefix) as a candidacy, and the term is held by the session
// as that lock, with what a lock has (renewal, the session's keepalive,
// loss reported as lock_lost, release when the session ends). A token
// may use an election if it may use its key.

// electionName reads the election name of r's path, checks that p may
// use the election's key, and returns both.
func electionName(r *http.Request, p *principal) (name, key string, pr *problem) {
	return prefixedName(r, p, "election", election.KeyPrefix)
}

// prefixedName reads the name of r's path of an election or a semaphore
// (what), kept at prefix+name, checks that p may use that key, and
// returns both.
func prefixedName(r *http.Request, p *principal, what, prefix string) (name, key string, pr *problem) {
	name = r.PathValue("name")
	key = prefix + name
	switch err := distlock.ValidateKey(name); {
	case err != nil:
		return "", "", newProblem(http.StatusBadRequest, ProblemBadName,
			what+" name: "+strings.TrimPrefix(err.Error(), "distlock: "))
	case len(key) > driver.MaxKeyLen:
		return "", "", newProblem(http.StatusBadRequest, ProblemBadName,
			fmt.Sprintf("%s name: %d bytes, more than %d", what, len(name), driver.MaxKeyLen-len(prefix)))
	case !p.may(key):
		return "", "", p.forbidden(key)
	}
	return name, key, nil
}

// electionRequest is electionName, then the JSON body into req.
func electionRequest(r *http.Request, p *principal, req any) (name, key string, pr *problem) {
	if name, key, pr = electionName(r, p); pr != nil {
		return "", "", pr
	}
	if pr := readJSON(r, req); pr != nil {
		return "", "", pr
	}
	return name, key, nil
}

// checkValue refuses a leader's value that would garble a listing or a
// terminal.
func checkValue(v string) *problem {
	bad := len(v) > maxValue || !utf8.ValidString(v) ||
		strings.ContainsFunc(v, func(r rune) bool { return unicode.IsControl(r) })
	if bad {
		return newProblem(http.StatusBadRequest, ProblemBadRequest,
			fmt.Sprintf("value must be at most %d bytes of UTF-8 without control characters", maxValue))
	}
	return nil
}

type campaignRequest struct {
	Session string  `json:"session"`
	Value   *string `json:"value"`
}

type termResponse struct {
	Election       string `json:"election"`
	Lock           string `json:"lock"`
	Token          string `json:"token"`
	Value          string `json:"value"`
	TTLRemainingMS int64  `json:"ttl_remaining_ms"`
}

// leaderJSON is a leader in an answer or an event.
type leaderJSON struct {
	Election string `json:"election"`
	Value    string `json:"value"`
	Token    string `json:"token"`
}

// campaign waits until the session is elected, or ?wait= ends (wait=0:
// one try), and answers its term. A retried campaign (its answer lost) answers the
// session's term, or waits for the campaign in progress.
func (g *Gateway) campaign(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	var req campaignRequest
	name, key, pr := electionRequest(r, p, &req)
	if pr != nil {
		return pr
	}
	// A campaign without ?wait= waits as long as the gateway allows; one
	// with ?wait=0 (or any campaign under WithMaxWait(0)) is one try, as
	// an acquire with wait 0 is: elected at once when the election has no
	// leader, however long the lock service takes to grant it. (A try
	// sent as the shortest wait could be refused while nobody led, its
	// deadline passed before a slow service or a loaded machine granted
	// the free election.)
	wait := g.cfg.maxWait
	if r.URL.Query().Has("wait") {
		if wait, pr = waitParam(r, g.cfg.maxWait); pr != nil {
			return pr
		}
	}
	s, pr := g.lookup(req.Session, p)
	if pr != nil {
		return pr
	}
	value := s.owner
	if req.Value != nil {
		value = *req.Value
	}
	if pr := checkValue(value); pr != nil {
		return pr
	}
	var opts []election.Option
	if wait <= 0 {
		opts = append(opts, election.WithLockOptions(distlock.WithWait(false)))
	}
	e, err := election.New(s.client, name, opts...)
	if err != nil { // (the name was checked)
		return newProblem(http.StatusBadRequest, ProblemBadName, err.Error())
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
	h, err := s.acquire(r.Context(), key, wait, candidacy{e: e, value: value})
	switch {
	case err == nil:
	case errors.Is(err, errSessionEnded):
		return sessionEnded()
	case errors.Is(err, errTooManyLocks):
		return g.sessionLimit("locks and terms")
	case errors.Is(err, errHeldOtherwise):
		return newProblem(http.StatusConflict, ProblemNotElected,
			fmt.Sprintf("the session holds the election's key %s as a lock or a permit: release it first", quoteName(key)))
	case r.Context().Err() != nil:
		return nil // the client went away
	case errors.Is(err, errNotAcquired), errors.Is(err, distlock.ErrNotAcquired):
		pr := newProblem(http.StatusConflict, ProblemNotElected,
			fmt.Sprintf("election %s has another leader", quoteName(name)))
		if l, err := g.leaderOf(r.Context(), name); err == nil {
			pr.Leader = &l
		}
		return pr
	default:
		return g.backendProblem(err)
	}
	s.mu.Lock()
	in := s.locks[key] == h
	left := s.lockLeftLocked(h)
	s.mu.Unlock()
	if !in || left <= 0 {
		return newProblem(http.StatusConflict, ProblemLockLost, "the term was lost before it could be answered")
	}
	writeJSON(w, http.StatusOK, termResponse{Election: name, Lock: key, Token: strconv.FormatUint(h.token, 10),
		Value: h.term.Value(), TTLRemainingMS: ms(left)})
	return nil
}

// leaderOf reads the leader of the election name through the gateway's
// reader, within a second.
func (g *Gateway) leaderOf(ctx context.Context, name string) (leaderJSON, error) {
	e, err := election.New(g.reader, name)
	if err != nil {
		return leaderJSON{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	l, err := e.Leader(ctx)
	if err != nil {
		return leaderJSON{}, err
	}
	return leaderJSON{Election: name, Value: l.Value, Token: strconv.FormatUint(l.Token, 10)}, nil
}

// termOf finds the session's term of the election whose key is key, with
// token tok; a term with another token is a stale token, refused for op.
func (g *Gateway) termOf(s *session, name, key string, tok uint64, op string) (*held, *problem) {
	s.mu.Lock()
	h := s.locks[key]
	s.mu.Unlock()
	switch {
	case h == nil || h.term == nil:
		return nil, newProblem(http.StatusConflict, ProblemNotHeld,
			fmt.Sprintf("the session holds no term of election %s (resigned, lost, or never elected): nothing was done", quoteName(name)))
	case h.token != tok:
		g.reject(op, key, tok)
		return nil, newProblem(http.StatusConflict, ProblemNotHeld,
			fmt.Sprintf("token %d is not the session's term of election %s: nothing was done", tok, quoteName(name)))
	}
	return h, nil
}

type resignRequest struct {
	Session string `json:"session"`
	Token   string `json:"token"`
}

type resignResponse struct {
	Resigned bool   `json:"resigned"`
	Token    string `json:"token"`
}

// resign ends the session's term with the token sent: owner-checked, so
// that a stale token never ends a later term.
func (g *Gateway) resign(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	var req resignRequest
	name, key, pr := electionRequest(r, p, &req)
	if pr != nil {
		return pr
	}
	tok, pr := parseToken(req.Token)
	if pr != nil {
		return pr
	}
	s, pr := g.lookup(req.Session, p)
	if pr != nil {
		return pr
	}
	h, pr := g.termOf(s, name, key, tok, "resign")
	if pr != nil {
		return pr
	}
	if !s.drop(h, "released", "") {
		return newProblem(http.StatusConflict, ProblemNotHeld, "the term was resigned or lost meanwhile")
	}
	switch err := g.giveBack(r, h, "resigned"); {
	case err == nil:
	case errors.Is(err, distlock.ErrLockLost):
		return newProblem(http.StatusConflict, ProblemLockLost, "the term had been lost before the resignation: "+
			strings.TrimPrefix(err.Error(), "election: resign: distlock: "))
	default:
		return g.backendProblem(err)
	}
	writeJSON(w, http.StatusOK, resignResponse{Resigned: true, Token: strconv.FormatUint(h.token, 10)})
	return nil
}

type proclaimRequest struct {
	Session string  `json:"session"`
	Token   string  `json:"token"`
	Value   *string `json:"value"`
}

// proclaim replaces the value of the session's term with the token sent.
func (g *Gateway) proclaim(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	var req proclaimRequest
	name, key, pr := electionRequest(r, p, &req)
	if pr != nil {
		return pr
	}
	tok, pr := parseToken(req.Token)
	if pr != nil {
		return pr
	}
	if req.Value == nil {
		return newProblem(http.StatusBadRequest, ProblemBadRequest, "value is required")
	}
	if pr := checkValue(*req.Value); pr != nil {
		return pr
	}
	s, pr := g.lookup(req.Session, p)
	if pr != nil {
		return pr
	}
	h, pr := g.termOf(s, name, key, tok, "proclaim")
	if pr != nil {
		return pr
	}
	ctx, cancel := context.WithTimeout(r.Context(), releaseTimeout)
	defer cancel()
	h.ownerMu.Lock()
	defer h.ownerMu.Unlock()
	switch err := h.term.Proclaim(ctx, *req.Value); {
	case err == nil:
		g.ownerChanged(h, *req.Value)
	case errors.Is(err, distlock.ErrLockLost), errors.Is(err, distlock.ErrNotHeld):
		return newProblem(http.StatusConflict, ProblemLockLost, "the term ended before the proclamation: nothing was changed")
	case errors.Is(err, errors.ErrUnsupported):
		return newProblem(http.StatusNotImplemented, ProblemUnsupported, "the lock service cannot change the value of a term")
	case r.Context().Err() != nil:
		return nil // the client went away
	default:
		return g.backendProblem(err)
	}
	s.mu.Lock()
	left := s.lockLeftLocked(h)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, termResponse{Election: name, Lock: key, Token: strconv.FormatUint(h.token, 10),
		Value: h.term.Value(), TTLRemainingMS: ms(left)})
	return nil
}

// readsHolders reports whether the backend can read a key's holder, which
// leader and observe need.
func (g *Gateway) readsHolders() bool {
	_, reads := g.b.(driver.HolderReader)
	_, lists := g.b.(driver.Lister)
	return reads || lists
}

func cannotReadLeaders() *problem {
	return newProblem(http.StatusNotImplemented, ProblemUnsupported, "the lock service cannot read the holder of a key, nor a leader")
}

// leader answers the election's leader, as the lock service has it now,
// whoever elected it (this gateway, another, a client of the service).
func (g *Gateway) leader(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	name, _, pr := electionName(r, p)
	if pr != nil {
		return pr
	}
	if !g.readsHolders() {
		return cannotReadLeaders()
	}
	e, err := election.New(g.reader, name)
	if err != nil { // (the name was checked)
		return newProblem(http.StatusBadRequest, ProblemBadName, err.Error())
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	l, err := e.Leader(ctx)
	switch {
	case err == nil:
	case errors.Is(err, election.ErrNoLeader):
		return newProblem(http.StatusNotFound, ProblemNoLeader, fmt.Sprintf("election %s has no leader", quoteName(name)))
	case errors.Is(err, distlock.ErrClosed):
		return closingProblem()
	case r.Context().Err() != nil:
		return nil // the client went away
	default:
		return g.backendProblem(err)
	}
	writeJSON(w, http.StatusOK, leaderJSON{Election: name, Value: l.Value, Token: strconv.FormatUint(l.Token, 10)})
	return nil
}

// observe streams the election's leader as Server-Sent Events: the
// current one first, then each change, in term order (election.Observe):
// a "leader" event with its value and token, a "no_leader" event when
// there is none. It reports states: a slow stream gets the latest.
func (g *Gateway) observe(w http.ResponseWriter, r *http.Request, p *principal) *problem {
	name, _, pr := electionName(r, p)
	if pr != nil {
		return pr
	}
	if !g.readsHolders() {
		return cannotReadLeaders()
	}
	e, err := election.New(g.reader, name)
	if err != nil { // (the name was checked)
		return newProblem(http.StatusBadRequest, ProblemBadName, err.Error())
	}
	end, pr := g.startStream(p)
	if pr != nil {
		return pr
	}
	defer end()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if g.observeOpening != nil {
		g.observeOpening()
	}
	leaders := e.Observe(ctx) // closed when ctx ends or the gateway closes
	// Close marks the gateway closed before it closes the reader: a
	// gateway not closed once the observation is open ends the stream
	// by its Close, and one closed before is refused, never answered
	// with a stream that ends at once.
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return closingProblem()
	}
	write := startSSE(w)
	if !write("retry: 1000\n\n") {
		return nil
	}
	beat := time.NewTimer(g.cfg.heartbeat)
	defer beat.Stop()
	for {
		select {
		case l, ok := <-leaders:
			if !ok {
				return nil
			}
			typ, data := "no_leader", []byte(nil)
			if l.Token == 0 {
				data, _ = json.Marshal(map[string]string{"election": name})
			} else {
				typ = "leader"
				data, _ = json.Marshal(leaderJSON{Election: name, Value: l.Value, Token: strconv.FormatUint(l.Token, 10)})
			}
			if !write("event: " + typ + "\ndata: " + string(escapeControls(data)) + "\n\n") {
				return nil
			}
		case <-beat.C:
			if !write(": heartbeat\n\n") {
				return nil
			}
			beat.Reset(g.cfg.heartbeat)
		case <-ctx.Done():
			return nil
		}
	}
}
