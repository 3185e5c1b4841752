package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
)

// Why a session ended.
const (
	endDeleted = "deleted"
	endExpired = "expired"
	endClosed  = "gateway closed"
)

// maxEvents bounds the events a session keeps for its next keepalive; past
// it the oldest are dropped and counted.
const maxEvents = 256

// maxOwner bounds the owner of a session, in bytes.
const maxOwner = 256

// A session is a lease that owns locks, kept alive by its client.
//
// Who guards what: id, owner, ttl, principal, share, client, timer are set
// before the session is published and never changed (the counts of share
// are the Gateway's mu's); mu guards the rest. Lock order: the Gateway's
// mu, then a session's mu (so that a lock enters or leaves both the
// session and the gateway's holders at once); nothing else is locked or
// called under a session's mu but its timer.
type session struct {
	g         *Gateway
	id        string
	owner     string
	ttl       time.Duration
	principal string
	share     *share // its principal's, whose counts g.mu guards
	client    *distlock.Client
	timer     *time.Timer // fires at the deadline, unless a request is in progress

	mu       sync.Mutex
	ended    string    // why the session ended; "" while it lives
	deadline time.Time // when it expires without a request
	active   int       // requests in progress: it does not expire meanwhile
	locks    map[string]*held
	pending  map[string]*pendingAcquire // acquires in progress
	events   []event
	dropped  int           // events dropped since the last keepalive
	changed  chan struct{} // closed (and replaced) on an event, a newer keepalive, or the end
	poll     uint64        // the generation of the newest keepalive
}

// held is a lock held by a session, or a term of an election, which the
// session holds as the lock of the election's key (see package election).
type held struct {
	s      *session
	name   string
	lock   grant
	term   *election.Term     // nil for a lock or a permit
	permit bool               // a permit of the semaphore kept at name: one of its holders, never in Gateway.holders
	shared bool               // a shared (read) lock of name: in Gateway.readers, never in Gateway.holders
	sem    distlock.Semaphore // a permit's: the limit and slots it was asked with
	token  uint64
	since  time.Time
	lease  time.Duration // from the grant to the lock's first local deadline; 0: the lock has none

	ownerMu sync.Mutex             // serializes the owner changes of a lock
	owner   atomic.Pointer[string] // a term's value, or the owner a change set (POST .../owner); nil: the session's
}

// kind tells locks, shared locks, terms and permits apart, as
// candidacy.kind does.
func (h *held) kind() string {
	switch {
	case h.term != nil:
		return "term"
	case h.permit:
		return "permit"
	case h.shared:
		return "shared lock"
	}
	return "lock"
}

// ownerName is the owner of h as the gateway reports it: a term's value,
// the last owner set for a lock, else its session's.
func (h *held) ownerName() string {
	if o := h.owner.Load(); o != nil {
		return *o
	}
	return h.s.owner
}

// grant is what the gateway holds: a *distlock.Lock, or a term.
type grant interface {
	Token() uint64
	Err() error
	Done() <-chan struct{}
	AtRisk() <-chan struct{}
	Deadline() (time.Time, bool)
	Release(ctx context.Context) error
}

// termGrant is a term as a grant: its release is its resignation.
type termGrant struct{ *election.Term }

func (t termGrant) Release(ctx context.Context) error { return t.Resign(ctx) }

var (
	_ grant = (*distlock.Lock)(nil)
	_ grant = termGrant{}
)

// event is what a keepalive reports.
type event struct {
	Type           string `json:"type"` // lock_lost or at_risk
	Lock           string `json:"lock"`
	Token          string `json:"token"`
	Reason         string `json:"reason,omitempty"` // for lock_lost: deadline_passed, max_hold, lost, forced_release
	Detail         string `json:"detail,omitempty"`
	TTLRemainingMS *int64 `json:"ttl_remaining_ms,omitempty"` // for at_risk
}

// newID returns a session id: the gateway's epoch, then 128 random bits.
func (g *Gateway) newID() string { return g.epoch + "." + rand.Text() }

// cutID splits a session id into its epoch and random part.
func cutID(id string) (epoch, rest string, ok bool) { return strings.Cut(id, ".") }

// checkOwner refuses an owner that would garble a status listing.
func checkOwner(owner string) *problem {
	bad := len(owner) > maxOwner || !utf8.ValidString(owner) ||
		strings.ContainsFunc(owner, func(r rune) bool { return unicode.IsControl(r) })
	if bad {
		return newProblem(http.StatusBadRequest, ProblemBadRequest,
			fmt.Sprintf("owner must be at most %d bytes of UTF-8 without control characters", maxOwner))
	}
	return nil
}

// newSession creates and publishes a session.
func (g *Gateway) newSession(owner string, ttl time.Duration, p *principal) (*session, *problem) {
	if ttl < g.cfg.minTTL || ttl > g.cfg.maxTTL { // (createSession says why of the TTL sent)
		return nil, newProblem(http.StatusBadRequest, ProblemBadTTL,
			fmt.Sprintf("ttl %v is not within [%v, %v]", ttl, g.cfg.minTTL, g.cfg.maxTTL))
	}
	if pr := checkOwner(owner); pr != nil {
		return nil, pr
	}
	opts := []distlock.Option{distlock.WithTTL(ttl), distlock.WithLogger(g.cfg.logger)}
	if owner != "" {
		opts = append(opts, distlock.WithOwner(owner))
	}
	if g.cfg.meters != nil {
		opts = append(opts, distlock.WithMeterProvider(g.cfg.meters))
	}
	c, err := distlock.New(g.b, opts...)
	if err != nil {
		return nil, newProblem(http.StatusBadRequest, ProblemBadTTL, strings.TrimPrefix(err.Error(), "distlock: "))
	}
	s := &session{g: g, id: g.newID(), owner: owner, ttl: ttl, principal: p.name, share: g.share(p), client: c,
		deadline: time.Now().Add(ttl), locks: map[string]*held{}, pending: map[string]*pendingAcquire{},
		changed: make(chan struct{})}
	g.mu.Lock()
	switch {
	case g.closed:
		g.mu.Unlock()
		return nil, closingProblem()
	case s.share.sessions >= s.share.maxSessions:
		pr := s.share.tooMany(s.share.sessions, "sessions open")
		g.mu.Unlock()
		return nil, pr
	case len(g.sessions) >= g.cfg.maxSessions:
		pr := tooMany(len(g.sessions), "sessions open")
		g.mu.Unlock()
		return nil, pr
	}
	s.share.sessions++
	s.timer = time.AfterFunc(ttl, s.expire)
	g.sessions[s.id] = s
	g.mu.Unlock()
	g.inst.sessions.Add(context.Background(), 1)
	return s, nil
}

// enter counts a request of the session in progress; it returns false
// if the session has ended.
func (s *session) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != "" {
		return false
	}
	s.active++
	return true
}

// leave ends a request of the session: the TTL runs again from now.
func (s *session) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	s.deadline = time.Now().Add(s.ttl)
	if s.active == 0 && s.ended == "" {
		s.timer.Reset(s.ttl)
	}
}

// left is the time until the session expires without a request.
func (s *session) leftLocked() time.Duration {
	if s.active > 0 {
		return s.ttl
	}
	return time.Until(s.deadline)
}

// expire ends the session if its deadline passed with no request in
// progress; it runs on the session's timer.
func (s *session) expire() {
	s.mu.Lock()
	if s.ended != "" || s.active > 0 {
		s.mu.Unlock()
		return
	}
	if d := time.Until(s.deadline); d > 0 {
		s.timer.Reset(d)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.g.goBackground(func() {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		s.g.endSession(ctx, s, endExpired)
	})
}

// endSession ends s for why, unless it had ended, and releases its locks.
func (g *Gateway) endSession(ctx context.Context, s *session, why string) error {
	g.mu.Lock()
	s.mu.Lock()
	if s.ended != "" || (why == endExpired && (s.active > 0 || time.Now().Before(s.deadline))) {
		// Ended already, or a request came in since the timer fired.
		s.mu.Unlock()
		g.mu.Unlock()
		return nil
	}
	s.ended = why
	s.timer.Stop()
	n := len(s.locks)
	for _, h := range s.locks {
		g.forgetLocked(h)
	}
	hs := slices.Collect(maps.Values(s.locks))
	clear(s.locks)
	s.wakeLocked() // (replaced, not just closed: a request that entered before may still wake it)
	delete(g.sessions, s.id)
	s.share.sessions--
	s.mu.Unlock()
	g.mu.Unlock()
	g.inst.sessions.Add(context.Background(), -1)
	g.cfg.logger.Debug("gateway: session ended", "owner", s.owner, "why", why, "locks", n)
	err := s.client.Close(ctx)
	// The events follow the releases, so that a watcher that reads the
	// lock service on them finds the locks free.
	g.mu.Lock()
	for _, h := range hs {
		g.publishLocked("released", h, "session_"+strings.ReplaceAll(why, " ", "_"))
	}
	g.mu.Unlock()
	if err != nil {
		return fmt.Errorf("gateway: session of %q: %w", s.owner, err)
	}
	return nil
}

// addEventLocked queues e for the next keepalive and wakes the open one.
func (s *session) addEventLocked(e event) {
	if len(s.events) == maxEvents {
		s.events = s.events[1:]
		s.dropped++
	}
	s.events = append(s.events, e)
	s.wakeLocked()
}

func (s *session) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// lockLeftLocked is the time left of h as the gateway can vouch for it:
// the lesser of the session's and the lock's local deadline.
func (s *session) lockLeftLocked(h *held) time.Duration {
	return lockLeft(s.leftLocked(), h.lock)
}

// deadliner is what lockLeft asks of a lock.
type deadliner interface {
	Err() error
	Deadline() (time.Time, bool)
}

// lockLeft is the lesser of the session's time left and l's. The deadline
// is read before Err: a lock that ends between the two calls then counts
// as ended, where the other order would read "no deadline" from the ended
// lock and vouch for the session's whole time left.
func lockLeft(sessionLeft time.Duration, l deadliner) time.Duration {
	d, ok := l.Deadline()
	if l.Err() != nil {
		return 0
	}
	if ok {
		sessionLeft = min(sessionLeft, time.Until(d))
	}
	return max(sessionLeft, 0)
}

// errNotAcquired is an acquire whose wait ended.
var errNotAcquired = errors.New("not acquired")

// candidacy is what an acquire asks for: a lock when e and permit are
// nil (a shared one with shared); else a term of e, the election whose
// key is the name acquired, with value; or a permit of the semaphore
// kept at the name.
type candidacy struct {
	e      *election.Election
	value  string
	permit *distlock.Semaphore
	shared bool
}

// kind tells locks, shared locks, terms and permits apart.
func (c candidacy) kind() string {
	switch {
	case c.e != nil:
		return "term"
	case c.permit != nil:
		return "permit"
	case c.shared:
		return "shared lock"
	}
	return "lock"
}

// acquire returns the session's grant of name: the one it holds (a retried
// acquire), or a new one, waiting at most wait. With a candidacy it is a
// campaign, and the grant a term; a lock and a term of the same name are
// not each other (errHeldOtherwise).
func (s *session) acquire(ctx context.Context, name string, wait time.Duration, cand candidacy) (*held, error) {
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	for {
		s.mu.Lock()
		if s.ended != "" {
			s.mu.Unlock()
			return nil, errSessionEnded
		}
		if h := s.locks[name]; h != nil {
			s.mu.Unlock()
			if h.kind() != cand.kind() {
				return nil, errHeldOtherwise
			}
			if p := cand.permit; p != nil && p.Limit != h.sem.Limit {
				// A retry that names another limit is refused as
				// another session's would be, not answered the
				// permit of another limit.
				return nil, &driver.LimitError{Stored: h.sem.Limit, Asked: p.Limit}
			}
			if p := cand.permit; p != nil && p.Slots != h.sem.Slots {
				return nil, errOtherSlots
			}
			return h, nil
		}
		if p := s.pending[name]; p != nil {
			// The same acquire, retried while the first one waits: wait
			// for its outcome. A try does not wait: the lock is not
			// granted yet (and a try is not counted as a waiting request).
			s.mu.Unlock()
			if wait <= 0 {
				return nil, errNotAcquired
			}
			select {
			case <-p.done:
				s.mu.Lock()
				abandoned := p.abandoned
				s.mu.Unlock()
				if abandoned {
					// The acquirer gave up on it: a new wait would
					// grant the lock after the abandon answered.
					return nil, errNotAcquired
				}
				continue
			case <-ctx.Done():
				return nil, errNotAcquired
			}
		}
		if s.countLocked() >= s.g.cfg.maxLocks {
			s.mu.Unlock()
			return nil, errTooManyLocks
		}
		tctx, tcancel := context.WithCancel(ctx)
		p := &pendingAcquire{done: make(chan struct{}), cancel: tcancel}
		s.pending[name] = p
		s.mu.Unlock()
		s.g.mu.Lock()
		w, busy := s.g.startAcquireLocked(s, name, wait)
		s.g.mu.Unlock()
		h, err := s.take(tctx, name, wait, cand)
		tcancel()
		s.g.endAcquire(name, w, busy, err == nil, errors.Is(err, distlock.ErrNotAcquired))
		s.mu.Lock()
		delete(s.pending, name)
		close(p.done)
		s.mu.Unlock()
		return h, err
	}
}

// countLocked is the number of locks the session holds or waits for, each
// name once: a grant is in s.locks before its acquire leaves s.pending,
// and counting it twice then refused a session under its limit
// (ProblemSessionLimit, which clients do not retry). s.mu is held.
func (s *session) countLocked() int {
	n := len(s.locks)
	for name := range s.pending {
		if _, held := s.locks[name]; !held {
			n++
		}
	}
	return n
}

// pendingAcquire is an acquire in progress in a session.
type pendingAcquire struct {
	done      chan struct{}      // closed when it ends
	cancel    context.CancelFunc // ends its wait (abandon)
	abandoned bool               // by an abandon: its retries end with it (s.mu)
}

// abandon ends the session's acquire of name in progress, if any, and
// waits for it to end; then it returns the session's grant of name, if it
// has one, for the caller to release: an acquirer that gave up asks for
// this, so that a grant made as it gave up is not left to anyone. It
// returns nil if ctx ends first.
func (s *session) abandon(ctx context.Context, name string) (*held, bool) {
	s.mu.Lock()
	p := s.pending[name]
	if p != nil {
		p.abandoned = true
	}
	s.mu.Unlock()
	if p != nil {
		p.cancel()
		select {
		case <-p.done:
		case <-ctx.Done():
			return nil, false
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.locks[name], true
}

var (
	errSessionEnded  = errors.New("session ended")
	errTooManyLocks  = errors.New("too many locks")
	errHeldOtherwise = errors.New("held as another kind: a lock, a shared lock, a term or a permit")
	errOtherSlots    = errors.New("the session's permit was asked with slots, or without, otherwise")
)

// take acquires name through the session's Client, as a lock or as a
// term of cand's election, and publishes the grant.
func (s *session) take(ctx context.Context, name string, wait time.Duration, cand candidacy) (*held, error) {
	var (
		l    grant
		term *election.Term
		err  error
	)
	switch {
	case cand.e != nil:
		// A campaign waits, or tries (wait 0), as its Election says.
		if term, err = cand.e.Campaign(ctx, cand.value); err == nil {
			l = termGrant{term}
		}
	case cand.permit != nil:
		l, err = s.client.Acquire(ctx, name, distlock.WithSemaphore(*cand.permit), distlock.WithWait(wait > 0))
	case cand.shared:
		l, err = s.client.Acquire(ctx, name, distlock.WithShared(true), distlock.WithWait(wait > 0))
	case wait > 0:
		l, err = s.client.Acquire(ctx, name)
	default:
		l, err = s.client.TryAcquire(ctx, name)
	}
	if err != nil {
		if errors.Is(err, distlock.ErrClosed) {
			return nil, errSessionEnded
		}
		return nil, err
	}
	h := &held{s: s, name: name, lock: l, term: term, permit: cand.permit != nil, shared: cand.shared,
		token: l.Token(), since: time.Now()}
	if cand.permit != nil {
		h.sem = *cand.permit
	}
	if term != nil {
		v := term.Value() // the owner stored with the term
		h.owner.Store(&v)
	}
	if d, ok := l.Deadline(); ok {
		h.lease = d.Sub(h.since)
	}
	// Re-check the session before answering the grant: it may have ended
	// while the acquire waited.
	g := s.g
	g.mu.Lock()
	s.mu.Lock()
	ended := s.ended != "" || g.closed
	if !ended {
		s.locks[name] = h
		switch {
		case h.shared:
			if g.readers[name] == nil {
				g.readers[name] = map[*held]struct{}{}
			}
			g.readers[name][h] = struct{}{}
		case !h.permit: // a semaphore has many holders: Permits lists them
			g.holders[name] = h
		}
		g.publishLocked("granted", h, "")
		g.bg.Add(1)
	}
	s.mu.Unlock()
	g.mu.Unlock()
	if ended {
		// Bounded, so that a backend that hangs cannot hold this handler.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		l.Release(rctx)
		cancel()
		return nil, errSessionEnded
	}
	go func() {
		defer g.bg.Done()
		s.watch(h)
	}()
	return h, nil
}

// drop takes h out of its session, for why, and reports whether it was
// still in: "released" by its holder, "forced" by an administrator, or
// lost for the reason why (detail says how). Unless its holder gave it
// up, the session's keepalives learn of the loss in the same step: a
// keepalive that answers without h answers with its lock_lost event
// too, never with h merely gone ("not held" on the client's side).
func (s *session) drop(h *held, why, detail string) bool {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	s.g.forgetLocked(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.locks[h.name] == h
	if !in {
		return false
	}
	delete(s.locks, h.name)
	tok := strconv.FormatUint(h.token, 10)
	switch why {
	case "released":
	case "forced":
		// The holder is told now; watchers (publish) once the service
		// has answered the release (giveBack).
		s.addEventLocked(event{Type: "lock_lost", Lock: h.name, Token: tok,
			Reason: "forced_release", Detail: "released by an administrator"})
	default:
		// A loss: the lock is gone at the service already.
		s.g.publishLocked("lost", h, why)
		s.addEventLocked(event{Type: "lock_lost", Lock: h.name, Token: tok, Reason: why, Detail: detail})
	}
	return true
}

// watch reports what happens to h to its session's keepalives, until h
// ends.
func (s *session) watch(h *held) {
	var fired <-chan struct{} // the at-risk channel already reported
	var recheck *time.Timer
	for {
		risk := h.lock.AtRisk()
		if risk == fired {
			// Reported already: look again for a renewal that re-armed it.
			if recheck == nil {
				recheck = time.NewTimer(s.ttl / 8)
				defer recheck.Stop()
			} else {
				recheck.Reset(s.ttl / 8)
			}
			select {
			case <-h.lock.Done():
				s.lockEnded(h)
				return
			case <-recheck.C:
				continue
			}
		}
		select {
		case <-h.lock.Done():
			s.lockEnded(h)
			return
		case <-risk:
			fired = risk
			s.mu.Lock()
			if s.locks[h.name] == h {
				left := ms(s.lockLeftLocked(h))
				s.addEventLocked(event{Type: "at_risk", Lock: h.name, Token: strconv.FormatUint(h.token, 10), TTLRemainingMS: &left})
			}
			s.mu.Unlock()
		}
	}
}

// lockEnded reports the end of h: a loss, unless the holder gave it up.
func (s *session) lockEnded(h *held) {
	err := h.lock.Err()
	reason := "lost"
	switch {
	case errors.Is(err, distlock.ErrDeadlinePassed):
		reason = "deadline_passed"
	case errors.Is(err, distlock.ErrMaxHoldExceeded):
		reason = "max_hold"
	}
	detail := ""
	if err != nil {
		detail = err.Error()
	}
	s.drop(h, reason, detail)
}

// forgetLocked takes h out of the gateway's holders, or its readers;
// g.mu is held.
func (g *Gateway) forgetLocked(h *held) {
	if h.shared {
		if rs := g.readers[h.name]; rs != nil {
			delete(rs, h)
			if len(rs) == 0 {
				delete(g.readers, h.name)
			}
		}
		return
	}
	if g.holders[h.name] == h {
		delete(g.holders, h.name)
	}
}

// readersLocked returns the shared locks of name held through this
// gateway, by token; g.mu is held.
func (g *Gateway) readersLocked(name string) []*held {
	hs := slices.Collect(maps.Keys(g.readers[name]))
	slices.SortFunc(hs, func(a, b *held) int { return cmp.Compare(a.token, b.token) })
	return hs
}
