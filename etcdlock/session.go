package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/distlock/driver"
)

// session is one concurrency.Session (an etcd lease and its keep-alive
// stream) shared by the locks of one TTL and owner, with what the Backend
// learned about its lease.
type session struct {
	b    *Backend
	key  sessionKey
	secs int64 // the TTL asked for, in seconds
	cs   *concurrency.Session
	id   clientv3.LeaseID
	// keySuffix ends this session's key under each lock name: "/" and the
	// lease ID in hexadecimal, as concurrency.Mutex writes it (%x of an
	// int64), made once rather than formatted at each acquire.
	keySuffix string

	mu       sync.Mutex
	leases   map[*lease]struct{} // held locks
	lost     error               // why the session ended; nil while it lives
	last     driver.Validity     // the latest confirmation of the lease
	inflight *confirmation       // the latest confirmation under way
}

// confirmation is one KeepAliveOnce of a session's lease, shared by every
// caller that can use its answer.
type confirmation struct {
	sent time.Time // taken before the request was sent
	done chan struct{}
	v    driver.Validity
	err  error
}

// sessionKey identifies the sessions of a Backend: one per TTL and owner,
// since the owner List shows is recorded per session.
type sessionKey struct {
	secs  int64
	owner string
}

// sessionCall is the creation of a session, shared by the acquires that
// need it.
type sessionCall struct {
	done chan struct{}
	s    *session
	err  error
}

// session returns the live session for a TTL of secs seconds and owner,
// creating it if needed; owner is recorded for List.
func (b *Backend) session(ctx context.Context, secs int64, owner string) (*session, error) {
	k := sessionKey{secs, owner}
	b.mu.Lock()
	if b.life.Closed() {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	if s := b.sessions[k]; s != nil {
		b.mu.Unlock()
		return s, nil
	}
	c := b.pending[k]
	if c == nil {
		c = &sessionCall{done: make(chan struct{})}
		b.pending[k] = c
		// Open: checked above under mu, which Close holds to shut.
		b.life.Go(func() { b.createSession(c, k) })
	}
	b.mu.Unlock()
	select {
	case <-c.done:
		return c.s, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// createSession creates a session, bounded by the request timeout rather
// than by the context of whichever acquire asked first.
func (b *Backend) createSession(c *sessionCall, k sessionKey) {
	s, err := b.newSession(k)
	b.mu.Lock()
	delete(b.pending, k)
	switch {
	case err != nil:
	case !b.life.Go(s.watch): // under mu: a loss is reported after s is in sessions
		err = ErrClosed
	default:
		b.sessions[k] = s
	}
	b.mu.Unlock()
	if s != nil && err != nil {
		s.cs.Orphan()
		b.revoke(s.id)
		s = nil
	}
	c.s, c.err = s, err
	close(c.done)
}

func (b *Backend) newSession(k sessionKey) (*session, error) {
	secs, owner := k.secs, k.owner
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.requestTimeout)
	defer cancel()
	sent := time.Now()
	g, err := b.cli.Grant(ctx, secs)
	if err != nil {
		if b.ctx.Err() != nil {
			return nil, ErrClosed
		}
		return nil, b.sortErr(context.Background(), ctx, err)
	}
	s := &session{b: b, key: k, secs: secs, id: g.ID, keySuffix: "/" + strconv.FormatInt(int64(g.ID), 16), leases: map[*lease]struct{}{},
		last: driver.Validity{Sent: sent, TTL: time.Duration(g.TTL) * time.Second}}
	if owner != "" {
		if _, err := b.cli.Put(ctx, b.ownerKey(g.ID), owner, clientv3.WithLease(g.ID)); err != nil {
			b.revoke(g.ID)
			return nil, b.sortErr(context.Background(), ctx, err)
		}
	}
	s.cs, err = concurrency.NewSession(b.view, concurrency.WithLease(g.ID), concurrency.WithTTL(int(secs)))
	if err != nil {
		b.revoke(g.ID)
		return nil, fmt.Errorf("%w: etcdlock: keep-alive: %w", driver.ErrUnavailable, err)
	}
	return s, nil
}

// revoke gives a lease back, best effort, bounded by the request timeout.
func (b *Backend) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.requestTimeout)
	defer cancel()
	_, _ = b.cli.Revoke(ctx, id)
}

// watch waits for the session to end and reports the loss.
func (s *session) watch() {
	<-s.cs.Done()
	cause := fmt.Errorf("%w: keep-alive of lease %x ended (the lease expired or was revoked, or etcd did not answer for its TTL)", ErrSessionLost, int64(s.id))
	if s.b.ctx.Err() != nil || s.b.life.Closed() {
		cause = fmt.Errorf("%w: %w", ErrSessionLost, ErrClosed)
	}
	s.b.loseSession(s, cause)
}

// loseSession ends s: its locks are lost (their holders are told through
// OnLost) and later acquires use a new session.
func (b *Backend) loseSession(s *session, cause error) {
	s.mu.Lock()
	if s.lost != nil {
		s.mu.Unlock()
		return
	}
	s.lost = cause
	leases := make([]*lease, 0, len(s.leases))
	for l := range s.leases {
		leases = append(leases, l)
	}
	s.leases = nil
	s.mu.Unlock()

	b.mu.Lock()
	if b.sessions[s.key] == s {
		delete(b.sessions, s.key)
	}
	b.mu.Unlock()
	for _, l := range leases {
		l.lose(cause)
	}
	// The session may have ended on this side only (etcd unreachable for a
	// TTL): give the lease back so that its keys go now, not at expiry.
	b.life.Go(func() {
		s.cs.Orphan()
		b.revoke(s.id)
	})
}

// over reports whether the session's keep-alive has stopped, or is
// stopping: its context ends first, then its Done channel closes once the
// keep-alive stream has wound down, so a waiter woken by the context's end
// can find Done still open.
func (s *session) over() bool { return s.cs.Ctx().Err() != nil }

func (s *session) lostErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// freshFor is how old a confirmation may be for a new grant to use it: the
// Client then has most of the TTL left before it must renew.
func (s *session) freshFor() time.Duration { return time.Duration(s.secs) * time.Second / 4 }

// keyOf is the key this session's Mutex uses for a lock name.
func (s *session) keyOf(name string) string { return name + s.keySuffix }

// add registers a held lease; it fails once the session has ended or its
// keep-alive has stopped.
func (s *session) add(l *lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.lost != nil:
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, s.lost)
	case s.over():
		return fmt.Errorf("%w: %w: keep-alive of lease %x stopped", driver.ErrUnavailable, ErrSessionLost, int64(s.id))
	}
	s.leases[l] = struct{}{}
	return nil
}

func (s *session) remove(l *lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.leases, l)
}

// confirm returns a confirmation of the session's lease whose request was
// sent at or after notBefore: the latest one if it is recent enough, the one
// under way if it started recently enough, or a new KeepAliveOnce. A lease
// that etcd no longer knows ends the session; the error then matches
// ErrSessionLost and distlock.ErrLockLost.
func (s *session) confirm(ctx context.Context, notBefore time.Time) (driver.Validity, error) {
	s.mu.Lock()
	if s.lost != nil {
		err := s.lost
		s.mu.Unlock()
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrLockLost, err)
	}
	if !s.last.Sent.Before(notBefore) {
		v := s.last
		s.mu.Unlock()
		return v, nil
	}
	c := s.inflight
	if c == nil || c.sent.Before(notBefore) {
		c = &confirmation{sent: time.Now(), done: make(chan struct{})}
		s.inflight = c
		if !s.b.life.Go(func() { s.keepAliveOnce(c) }) {
			s.inflight = nil
			s.mu.Unlock()
			return driver.Validity{}, ErrClosed
		}
	}
	s.mu.Unlock()
	select {
	case <-c.done:
		return c.v, c.err
	case <-ctx.Done():
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrUnavailable, ctx.Err())
	}
}

func (s *session) keepAliveOnce(c *confirmation) {
	b := s.b
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.requestTimeout)
	defer cancel()
	resp, err := b.cli.KeepAliveOnce(ctx, s.id)
	if err == nil {
		c.v = driver.Validity{Sent: c.sent, TTL: time.Duration(resp.TTL) * time.Second}
	}
	s.mu.Lock()
	if err == nil && c.sent.After(s.last.Sent) {
		s.last = c.v
	}
	if s.inflight == c {
		s.inflight = nil
	}
	s.mu.Unlock()
	switch {
	case err == nil:
	case b.ctx.Err() != nil:
		c.err = ErrClosed
	case errors.Is(b.sortErr(context.Background(), nil, err), errLeaseGone):
		b.loseSession(s, errLeaseGone)
		c.err = fmt.Errorf("%w: %w", driver.ErrLockLost, errLeaseGone)
	default:
		c.err = b.sortErr(context.Background(), ctx, err)
	}
	close(c.done)
}
