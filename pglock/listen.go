package pglock

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock/driver"
)

// listener keeps LISTEN distlock_lease and LISTEN distlock_holder on a
// direct session, and passes each notified release on to the waiters of
// its key, and each notified change of holder to the watchers of its key.
//
// A waiter subscribes before its try: a release committed after the try
// read the row is notified after the subscription, so it cannot be missed
// while the listener stays live. A waiter that subscribed while the
// listener was not live polls; every change of state wakes every waiter,
// so that it subscribes again and learns the new state. A watcher
// subscribes only while the listener is live, and its watch ends when the
// listener stops being live: what was notified meanwhile is lost.
type listener struct {
	cfg *pgx.ConnConfig

	mu      sync.Mutex
	started bool                                  // run was started (lazily, in SessionMode)
	live    bool                                  // LISTEN is in effect
	changed chan struct{}                         // closed, and replaced, when live changes
	subs    map[string]map[*subscription]struct{} // waiters by key
	watches map[string]map[*holderSub]struct{}    // watchers by key
}

// holderSub is one watch's interest in changes of its key's holder.
type holderSub struct {
	l    *listener
	key  string
	c    chan struct{} // receives a value when a change is notified
	lost chan struct{} // closed when the listener stops being live
}

// subscription is one waiter's interest in releases of its key. Its
// methods accept a nil subscription (no listener): it is never live and
// never notified.
type subscription struct {
	l      *listener
	key    string
	waiter string        // the waiter's name in the key's queue
	c      chan struct{} // receives a value when a release is notified or live changes
	isLive bool          // whether the listener was live when it subscribed
}

func newListener(cfg *pgx.ConnConfig) *listener {
	return &listener{cfg: cfg, changed: make(chan struct{}),
		subs: map[string]map[*subscription]struct{}{}, watches: map[string]map[*holderSub]struct{}{}}
}

// start reports whether run is to be started: true once.
func (l *listener) start() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := l.started
	l.started = true
	return !was
}

// watch subscribes a watcher of key, once the listener is live, waiting
// for that until ctx ends; ok is false if it ended first.
func (l *listener) watch(ctx context.Context, key string) (s *holderSub, ok bool) {
	for {
		l.mu.Lock()
		if l.live {
			s := &holderSub{l: l, key: key, c: make(chan struct{}, 1), lost: make(chan struct{})}
			m := l.watches[key]
			if m == nil {
				m = map[*holderSub]struct{}{}
				l.watches[key] = m
			}
			m[s] = struct{}{}
			l.mu.Unlock()
			return s, true
		}
		changed := l.changed
		l.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, false
		}
	}
}

// cancel ends the watcher's subscription.
func (s *holderSub) cancel() {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.watches[s.key]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(l.watches, s.key)
		}
	}
}

func (l *listener) subscribe(key, waiter string) *subscription {
	s := &subscription{l: l, key: key, waiter: waiter, c: make(chan struct{}, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	s.isLive = l.live
	m := l.subs[key]
	if m == nil {
		m = map[*subscription]struct{}{}
		l.subs[key] = m
	}
	m[s] = struct{}{}
	return s
}

func (s *subscription) cancel() {
	if s == nil {
		return
	}
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.subs[s.key]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(l.subs, s.key)
		}
	}
}

func (s *subscription) live() bool { return s != nil && s.isLive }

// notified returns the channel that receives a value when a release of
// the key is notified or the listener's state changes.
func (s *subscription) notified() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.c
}

func (l *listener) setLive(live bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.live == live {
		return
	}
	l.live = live
	close(l.changed)
	l.changed = make(chan struct{})
	for _, m := range l.subs {
		for s := range m {
			s.wake()
		}
	}
	if !live {
		for key, m := range l.watches {
			for s := range m {
				close(s.lost)
			}
			delete(l.watches, key)
		}
	}
}

// notifyHolder wakes the watchers of the key named by a change of its
// holder (see version 5 in schema.sql): the payload is the key.
func (l *listener) notifyHolder(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.watches[key] {
		select {
		case s.c <- struct{}{}:
		default:
		}
	}
}

func (s *subscription) wake() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// notify wakes the key's waiter named by a release (see
// distlock_lease_release in schema.sql): the payload is the key, a newline
// and the waiter, which is empty when none was queued, and then every
// waiter of the key is woken. A payload without a newline (keys have
// none) is the key alone, from the release of an earlier version of the
// schema, which an earlier version's Migrate may have put back: it names
// no waiter, so every waiter of the key is woken, or none would be.
func (l *listener) notify(payload string) {
	key, waiter := payload, ""
	if i := strings.LastIndexByte(payload, '\n'); i >= 0 {
		key, waiter = payload[:i], payload[i+1:]
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs[key] {
		if waiter == "" || s.waiter == waiter {
			s.wake()
		}
	}
}

// listenBackoff paces reconnections of the listener.
var listenBackoff = driver.ExponentialBackoff(50*time.Millisecond, 5*time.Second)

// listenIdle is how long the listener's session may stay silent before
// it is pinged. A connection broken without a reset (a network partition,
// a host gone) delivers nothing and reports no error until TCP gives up,
// which takes minutes to hours: the watches it carries would wait that
// long for a change, and a LeaseMode waiter for its poll.
const listenIdle = 5 * time.Second

// run keeps the listener's session until ctx ends, reconnecting after a
// failure. requestTimeout bounds a ping and the session's close.
func (l *listener) run(ctx context.Context, requestTimeout time.Duration) {
	for failures := 0; ; {
		wasLive := l.session(ctx, requestTimeout)
		l.setLive(false)
		if wasLive {
			failures = 0
		}
		failures++
		d, _ := listenBackoff.Backoff(failures)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session connects, listens and passes notifications on until the
// connection fails, a ping after listenIdle of silence gets no answer
// within requestTimeout, or ctx ends. It reports whether LISTEN took
// effect.
func (l *listener) session(ctx context.Context, requestTimeout time.Duration) bool {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return false
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	for _, channel := range []string{leaseChannel, holderChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
			return false
		}
	}
	l.setLive(true)
	for {
		wctx, cancel := context.WithTimeout(ctx, listenIdle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() == nil && pgconn.Timeout(err):
			// Silent for listenIdle: a timeout leaves the connection
			// usable, and a notification that comes with the ping's
			// answer is kept for the next wait.
			pctx, cancel := context.WithTimeout(ctx, requestTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return true
			}
			continue
		default:
			return true
		}
		switch n.Channel {
		case leaseChannel:
			l.notify(n.Payload)
		case holderChannel:
			l.notifyHolder(n.Payload)
		}
	}
}
