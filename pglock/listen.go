package pglock

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/driver"
)

// listener keeps LISTEN distlock_lease on a direct session and passes
// each notified release on to the waiters of its key.
//
// A waiter subscribes before its try: a release committed after the try
// read the row is notified after the subscription, so it cannot be missed
// while the listener stays live. A waiter that subscribed while the
// listener was not live polls; every change of state wakes every waiter,
// so that it subscribes again and learns the new state.
type listener struct {
	cfg *pgx.ConnConfig

	mu   sync.Mutex
	live bool                                  // LISTEN is in effect
	subs map[string]map[*subscription]struct{} // waiters by key
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
	return &listener{cfg: cfg, subs: map[string]map[*subscription]struct{}{}}
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
	for _, m := range l.subs {
		for s := range m {
			s.wake()
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

// run keeps the listener's session until ctx ends, reconnecting after a
// failure.
func (l *listener) run(ctx context.Context, closeTimeout time.Duration) {
	for failures := 0; ; {
		wasLive := l.session(ctx, closeTimeout)
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
// connection fails or ctx ends. It reports whether LISTEN took effect.
func (l *listener) session(ctx context.Context, closeTimeout time.Duration) bool {
	conn, err := pgx.ConnectConfig(ctx, l.cfg)
	if err != nil {
		return false
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+leaseChannel); err != nil {
		return false
	}
	l.setLive(true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true
		}
		if n.Channel == leaseChannel {
			l.notify(n.Payload)
		}
	}
}
