package gatewaylock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/distlock/driver"
)

// sessionKey is what the locks of one session share: the gateway holds
// every lock of a session with the session's TTL and owner.
type sessionKey struct {
	ttl   time.Duration
	owner string
}

// A session is a gateway session shared by the Backend's locks of one TTL
// and owner, kept alive by its loop (a long-poll keepalive) until it ends.
//
// Who guards what: b, key are set at creation; id, err, stop, done are set
// before ready is closed and read only after it; mu guards the rest and
// the mutable fields of its leases.
type session struct {
	b     *Backend
	key   sessionKey
	ready chan struct{} // closed once the gateway answered the creation

	id   string             // the gateway's session id
	err  error              // why the creation failed
	stop context.CancelFunc // ends the loop
	done chan struct{}      // closed when the loop has returned

	mu      sync.Mutex
	ended   error             // why the session ended; nil while it lives
	leases  map[string]*lease // the grants held in it, by key
	busy    map[string]int    // keys with an acquire or a release in flight
	settled map[string]time.Time
	// settled holds when the last acquire or release of a key ended: an
	// answer to a keepalive sent before then may not show its outcome yet.
	lostEarly map[string]string
	// lostEarly holds the token of each lock_lost event of a key with a
	// request in flight and no lease: a grant lost before its answer came
	// is reported only once.
}

type sessionAnswer struct {
	ID string `json:"id"`
}

type lockState struct {
	Lock           string `json:"lock"`
	Token          string `json:"token"`
	TTLRemainingMS int64  `json:"ttl_remaining_ms"`
}

type keepaliveAnswer struct {
	Events []struct {
		Type   string `json:"type"`
		Lock   string `json:"lock"`
		Token  string `json:"token"`
		Reason string `json:"reason"`
		Detail string `json:"detail"`
	} `json:"events"`
	Locks []lockState `json:"locks"`
}

// session returns a live session for k in which key is neither held nor
// being acquired or released, creating one if there is none, with key
// reserved in it (release the reservation with settle). A Client acquires
// each key once at a time, so one session per TTL and owner is the rule;
// two Clients of one Backend that want the same key at once get a session
// each, since the gateway answers a second acquire of a key in the same
// session with the first one's grant.
func (b *Backend) session(ctx context.Context, k sessionKey, key string) (*session, error) {
	b.mu.Lock()
	if b.life.Closed() {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	var s *session
	for _, x := range b.sessions[k] {
		if x.reserve(key) {
			s = x
			break
		}
	}
	if s == nil {
		s = &session{b: b, key: k, ready: make(chan struct{}), leases: map[string]*lease{},
			busy: map[string]int{}, settled: map[string]time.Time{}, lostEarly: map[string]string{}}
		s.reserve(key)
		b.sessions[k] = append(b.sessions[k], s)
		b.life.Go(s.create) // open: mu keeps it so
	}
	b.mu.Unlock()
	select {
	case <-s.ready:
	case <-ctx.Done():
		s.settle(key)
		return nil, ctx.Err()
	}
	if s.err != nil {
		s.settle(key)
		return nil, s.err
	}
	return s, nil
}

// forget takes s out of the Backend's sessions.
func (b *Backend) forget(s *session) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ss := b.sessions[s.key]
	if i := slices.Index(ss, s); i >= 0 {
		ss = slices.Delete(ss, i, i+1)
	}
	if len(ss) == 0 {
		delete(b.sessions, s.key)
	} else {
		b.sessions[s.key] = ss
	}
}

// goBG runs f in the background, unless the Backend is closed, and
// reports whether it does.
func (b *Backend) goBG(f func(ctx context.Context)) bool {
	return b.life.Go(func() {
		ctx, cancel := context.WithTimeout(b.ctx, b.requestTimeout)
		defer cancel()
		f(ctx)
	})
}

// create asks the gateway for the session and starts its loop.
func (s *session) create() {
	defer close(s.ready)
	// do bounds the request: a timeout is the Backend's own, and matches
	// distlock.ErrUnavailable (a bound set here would be taken for the
	// caller's context, and be returned as it is).
	var a sessionAnswer
	err := s.b.do(s.b.ctx, "POST", "/v1/sessions", map[string]any{"owner": s.key.owner, "ttl": s.key.ttl.String()}, &a, 0)
	if err == nil && a.ID == "" {
		err = fmt.Errorf("%w: gatewaylock: the gateway answered a session without an id", driver.ErrUnavailable)
	}
	if err != nil {
		if s.b.ctx.Err() != nil {
			err = ErrClosed
		}
		s.err = err
		s.mu.Lock()
		s.ended = err
		s.mu.Unlock()
		s.b.forget(s)
		return
	}
	s.id = a.ID
	lctx, stop := context.WithCancel(s.b.ctx)
	s.stop, s.done = stop, make(chan struct{})
	// From create, which Close waits for: Close stops the loop it starts
	// (s.close), even one that starts as Close begins.
	s.b.life.GoAlways(func() { s.loop(lctx) })
}

// reserve marks key as being acquired in s, if s lives and neither holds
// key nor has a request of it in flight.
func (s *session) reserve(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != nil || s.leases[key] != nil || s.busy[key] > 0 {
		return false
	}
	s.busy[key]++
	return true
}

// settle ends a request of key in s.
func (s *session) settleLocked(key string) {
	if s.busy[key]--; s.busy[key] <= 0 {
		delete(s.busy, key)
		delete(s.lostEarly, key)
	}
	s.settled[key] = time.Now()
}

func (s *session) settle(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settleLocked(key)
}

// acquire acquires key in s, which has key reserved: a lock, or a
// shared lock.
func (s *session) acquire(ctx context.Context, key string, opts driver.AcquireOptions, kind lockKind) (*lease, error) {
	g, sent, err := s.acquireOnce(ctx, key, opts, kind)
	var tok uint64
	if err == nil {
		var perr error
		if tok, perr = strconv.ParseUint(g.Token, 10, 64); perr != nil || tok == 0 {
			err = fmt.Errorf("%w: gatewaylock: malformed token %q", driver.ErrUnavailable, g.Token)
		} else if g.TTLRemainingMS <= 0 {
			// Less than a millisecond left (the gateway rounds down): a
			// zero TTL would tell the Client that the grant has no time
			// bound.
			err = fmt.Errorf("%w: gatewaylock: granted with no time left", driver.ErrUnavailable)
		}
	}
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status/100 == 2 {
			// The gateway may have made a grant whose answer never came,
			// or make one still (an acquire that waits there has not seen
			// the cut yet): have it end the acquire and release what it
			// granted before Acquire returns, and otherwise (an older
			// gateway, no answer) the answer to a keepalive sent from now
			// on lists the grant, which is then released.
			if aerr := s.abandon(ctx, key); aerr != nil {
				s.poke()
			}
		}
		s.settle(key)
		return nil, err
	}
	l := &lease{s: s, key: key, election: candidacyOf(key, opts), token: tok, onLost: opts.OnLost,
		v: driver.Validity{Sent: sent, TTL: time.Duration(g.TTLRemainingMS) * time.Millisecond}}
	s.mu.Lock()
	if s.ended != nil {
		err := s.ended
		s.settleLocked(key)
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: gatewaylock: the session ended with the grant: %w", driver.ErrUnavailable, err)
	}
	if s.lostEarly[key] == g.Token {
		s.settleLocked(key)
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: gatewaylock: the gateway lost the grant before its answer came", driver.ErrUnavailable)
	}
	s.leases[key] = l
	s.settleLocked(key)
	l.granted, l.reported = s.settled[key], sent
	s.mu.Unlock()
	if time.Since(sent) > opts.TTL/4 {
		// The grant came after a long wait: its validity counts from the
		// send time, so confirm it afresh.
		if _, err := l.Refresh(ctx, opts.TTL); err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.b.requestTimeout)
			defer cancel()
			l.Release(rctx)
			return nil, err
		}
	}
	return l, nil
}

// abandon has the gateway end s's acquire of key still in progress there
// and release whatever grant of key s has, within the request timeout.
func (s *session) abandon(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.b.requestTimeout)
	defer cancel()
	return s.b.do(ctx, "POST", "/v1/locks/"+escape(key)+"/abandon", map[string]string{"session": s.id}, nil, 0)
}

// keepalive sends one keepalive of at most wait.
func (s *session) keepalive(ctx context.Context, wait time.Duration) (keepaliveAnswer, error) {
	var ka keepaliveAnswer
	err := s.b.do(ctx, "POST", "/v1/sessions/"+s.id+"/keepalive?wait="+wait.String(), nil, &ka, wait)
	return ka, err
}

// poke sends a keepalive that does not wait, in the background, and
// takes in its answer.
func (s *session) poke() {
	s.b.goBG(func(ctx context.Context) {
		if err := s.confirm(ctx); err != nil {
			s.b.logFailure(err)
		}
	})
}

// confirm sends a keepalive that does not wait and takes in its answer; a
// session the gateway no longer has ends.
func (s *session) confirm(ctx context.Context) error {
	sent := time.Now()
	ka, err := s.keepalive(ctx, 0)
	if err != nil {
		if ending(err) {
			s.end(sessionLost(err), !isNotFound(err))
		}
		return err
	}
	s.absorb(sent, ka)
	return nil
}

// pollWait is how long one keepalive of the loop waits: a quarter of the
// TTL, so that its answer (which the Backend counts from its send time)
// still vouches for most of a TTL when it comes.
func (s *session) pollWait() time.Duration {
	return max(min(s.key.ttl/4, s.b.maxWait), time.Millisecond)
}

// minInterval is the least time between the sends of two keepalives of
// the loop when the first one's answer had nothing to say.
func (s *session) minInterval() time.Duration {
	return min(s.pollWait()/2, 250*time.Millisecond)
}

// loop keeps the session alive with long-poll keepalives until it ends or
// ctx does. The gateway answers a long-poll early when a lock of the
// session is lost or at risk, and a gateway that dies cuts its
// connection: a cut is followed at once by a keepalive on a new
// connection, and if that one fails to reach the gateway too, or the
// gateway answers that it has no such session (a restarted gateway), the
// session ends and every lock in it is reported lost.
func (s *session) loop(ctx context.Context) {
	defer close(s.done)
	const firstPause = 50 * time.Millisecond
	pause := firstPause
	for {
		sent := time.Now()
		ka, err := s.keepalive(ctx, s.pollWait())
		if ctx.Err() != nil {
			return
		}
		if err != nil && cut(err) {
			sent = time.Now()
			ka, err = s.keepalive(ctx, 0)
			if ctx.Err() != nil {
				return
			}
			if err != nil && cut(err) {
				s.end(sessionLost(err), true)
				return
			}
		}
		switch {
		case err == nil:
			s.absorb(sent, ka)
			pause = firstPause
			// A gateway that caps waits at nothing (--max-wait 0) answers
			// at once: keep the loop to its pace instead of spinning. An
			// answer with events comes early on purpose.
			if len(ka.Events) == 0 {
				if d := time.Until(sent.Add(s.minInterval())); d > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
				}
			}
			continue
		case ending(err):
			s.end(sessionLost(err), !isNotFound(err))
			return
		}
		// A busy or failing gateway, or a request that timed out: the
		// locks' local deadlines cover the time until the next answer.
		s.b.logFailure(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, s.pollWait())
	}
}

// logFailure is where a background request's failure goes: nowhere, as
// the locks it concerns are told through their validity or OnLost.
func (b *Backend) logFailure(error) {}

// cut reports whether err is a connection that broke (reset, closed,
// refused), as opposed to an answer or a timeout.
func cut(err error) bool {
	var ae *apiError
	var ne net.Error
	if errors.As(err, &ae) || !errors.Is(err, driver.ErrUnavailable) {
		return false
	}
	return !(errors.As(err, &ne) && ne.Timeout())
}

// ending reports whether err means the session cannot be kept alive: the
// gateway does not know it, refuses the token, or nothing listens where
// the gateway was (a gateway's sessions live in its memory).
func ending(err error) bool {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status/100 == 4 && ae.Status != http.StatusTooManyRequests && ae.Status != http.StatusRequestTimeout
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

func isNotFound(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// sessionLost is the loss of the locks of a session that ended for err.
func sessionLost(err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%w: gatewaylock: the gateway no longer has the session (it restarted, or the session expired): %w", driver.ErrLockLost, err)
	}
	return fmt.Errorf("%w: gatewaylock: the session could not be kept alive: %w", driver.ErrLockLost, err)
}

// absorb takes in a keepalive answer to a request sent at sent: the
// validity of each lock it lists, the loss of each lock it reports lost
// or no longer lists, and the release of each grant it lists that no
// lease has (a grant whose answer was lost, or a release that failed).
func (s *session) absorb(sent time.Time, ka keepaliveAnswer) {
	listed := make(map[string]lockState, len(ka.Locks))
	for _, x := range ka.Locks {
		listed[x.Lock] = x
	}
	type loss struct {
		l   *lease
		err error
	}
	var lost []loss
	var orphans []lockState
	var abandoned []*lease
	s.mu.Lock()
	if s.ended != nil {
		s.mu.Unlock()
		return
	}
	for _, e := range ka.Events {
		l := s.leases[e.Lock]
		if e.Type == "lock_lost" && l == nil && s.busy[e.Lock] > 0 {
			s.lostEarly[e.Lock] = e.Token // for the acquire in flight, if it is that grant's
		}
		if e.Type != "lock_lost" || l == nil || e.Token != strconv.FormatUint(l.token, 10) {
			continue
		}
		delete(s.leases, e.Lock)
		l.lost = fmt.Errorf("%w: gatewaylock: the gateway lost the lock (%s): %s", driver.ErrLockLost, e.Reason, e.Detail)
		lost = append(lost, loss{l, l.lost})
	}
	for key, l := range s.leases {
		x, ok := listed[key]
		switch {
		case ok && x.Token == strconv.FormatUint(l.token, 10) && x.TTLRemainingMS > 0:
			if sent.After(l.v.Sent) {
				l.v = driver.Validity{Sent: sent, TTL: time.Duration(x.TTLRemainingMS) * time.Millisecond}
			}
			if l.abandoned && s.busy[key] == 0 {
				abandoned = append(abandoned, l)
			}
		case sent.After(l.granted):
			// Not listed by an answer to a request sent after the grant
			// was answered: the gateway no longer holds it.
			delete(s.leases, key)
			l.lost = fmt.Errorf("%w: gatewaylock: the gateway no longer holds the grant", driver.ErrLockLost)
			lost = append(lost, loss{l, l.lost})
		}
	}
	for _, x := range ka.Locks {
		l := s.leases[x.Lock]
		if (l != nil && x.Token == strconv.FormatUint(l.token, 10)) || s.busy[x.Lock] > 0 || !sent.After(s.settled[x.Lock]) {
			continue
		}
		s.busy[x.Lock]++
		orphans = append(orphans, x)
	}
	for key, t := range s.settled {
		if t.Before(sent) {
			delete(s.settled, key) // later answers are to requests sent later still
		}
	}
	s.mu.Unlock()
	for _, x := range lost {
		if x.l.onLost != nil {
			x.l.onLost(x.err)
		}
	}
	for _, x := range orphans {
		ran := s.b.goBG(func(ctx context.Context) {
			defer s.settle(x.Lock)
			err := s.b.do(ctx, "POST", "/v1/locks/"+escape(x.Lock)+"/release",
				map[string]string{"session": s.id, "token": x.Token}, nil, 0)
			if err != nil {
				s.b.logFailure(err)
			}
		})
		if !ran {
			s.settle(x.Lock)
		}
	}
	for _, l := range abandoned {
		s.b.goBG(func(ctx context.Context) { l.Release(ctx) })
	}
}

// end ends s for why (which matches distlock.ErrLockLost), unless it has
// ended: every lock in it is reported lost, and with del the session is
// deleted at the gateway (in the background), which releases whatever the
// gateway still holds in it.
func (s *session) end(why error, del bool) {
	s.mu.Lock()
	if s.ended != nil {
		s.mu.Unlock()
		return
	}
	s.ended = why
	ls := make([]*lease, 0, len(s.leases))
	for key, l := range s.leases {
		delete(s.leases, key)
		if l.lost == nil {
			l.lost = why
			ls = append(ls, l)
		}
	}
	s.mu.Unlock()
	s.b.forget(s)
	s.stop()
	for _, l := range ls {
		if l.onLost != nil {
			l.onLost(why)
		}
	}
	if del {
		s.b.goBG(func(ctx context.Context) { s.b.do(ctx, "DELETE", "/v1/sessions/"+s.id, nil, nil, 0) })
	}
}

// close ends s for Backend.Close: it stops the loop and deletes the
// session, which releases its locks.
func (s *session) close(ctx context.Context) {
	<-s.ready
	if s.err != nil {
		return
	}
	s.stop()
	<-s.done
	s.mu.Lock()
	ended := s.ended != nil
	s.mu.Unlock()
	if !ended {
		s.b.do(ctx, "DELETE", "/v1/sessions/"+s.id, nil, nil, 0)
	}
	s.end(fmt.Errorf("%w: %w", driver.ErrLockLost, ErrClosed), false)
}
