package redislock

// The pub/sub connection that the waiters of one Backend share.
//
// Subscription linger. A channel stays subscribed while at least one
// waiter waits on it, and for subscriptionLinger after the last one left,
// so that a chain of hand-offs on one key (each new waiter arriving while
// the previous one holds it) subscribes once rather than once per waiter:
// a waiter that finds its channel subscribed registers before its first
// try, at no cost. The UNSUBSCRIBE is sent by a timer, not by a returning
// Acquire. If the connection breaks, go-redis reconnects and subscribes
// again, and the waiters retry, since releases published meanwhile are
// lost; a SUBSCRIBE whose write failed is sent again, since go-redis's
// immediate reconnect does not include it.

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// holderChanged is the payload the scripts publish on a key's release
// channel when its holder changed, for the watchers of the holder.
const holderChanged = "h"

// subscriptionLinger is how long a release channel stays subscribed after
// its last waiter left.
const subscriptionLinger = time.Second

// subscriber multiplexes the waiters of one Backend over one pub/sub
// connection, each channel lingering as described above. Messages wake the
// waiters of their channel (all of them, or, on a Backend's wake channel,
// the queued waiter whose id starts the payload; a payload
// "<id>|<token>|<ms>" hands that waiter a grant, see waiter.handed). A
// subscription confirmation wakes the channel's waiters
// that have already tried: it is sent again after go-redis reconnects, and
// releases published while disconnected are lost. The scripts publish
// holderChanged on a key's release channel at every grant, release and
// change of owner: it wakes the channel's watchers (WatchHolder), which
// are registered as waiters with watch set and no id, and no waiter.
type subscriber struct {
	ps     *redis.PubSub
	linger time.Duration
	done   chan struct{} // closed when the dispatch goroutine exits

	// cmdMu orders SUBSCRIBE and UNSUBSCRIBE commands like the state
	// changes that caused them; it is held while sending, mu is not. Lock
	// order: cmdMu, then mu.
	cmdMu sync.Mutex

	// mu guards the fields below and every channelState and its waiters
	// map (a waiter's tried is atomic: its own goroutine sets it).
	mu      sync.Mutex
	closed  bool
	chans   map[string]*channelState
	byID    map[string]*waiter // queued waiters by id
	expires sync.WaitGroup     // linger expiries running
}

type channelState struct {
	waiters   map[*waiter]struct{}
	ready     chan struct{} // closed at the first confirmation
	confirmed bool

	// With no waiter left, the channel lingers: idleSince is when the last
	// one left, and expiry (when not nil) is the timer that unsubscribes
	// once the channel has been idle for the linger.
	idleSince time.Time
	expiry    *time.Timer
}

type waiter struct {
	id    string
	ch    string
	st    *channelState
	watch bool          // a watcher of the key's holder (WatchHolder), not a waiter
	wake  chan struct{} // buffered: a wake-up is never lost or blocking
	tried atomic.Bool   // the waiter has sent a try since registering

	// handed is the last grant a release handed this waiter: the payload
	// after its id, "<token>|<ms since its place was last refreshed>".
	handed atomic.Pointer[string]
}

func newSubscriber(client redis.UniversalClient, linger time.Duration) *subscriber {
	ps := client.Subscribe(context.Background())
	s := &subscriber{ps: ps, linger: linger, done: make(chan struct{}),
		chans: map[string]*channelState{}, byID: map[string]*waiter{}}
	msgs := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	go s.dispatch(msgs)
	return s
}

func (s *subscriber) dispatch(msgs <-chan any) {
	defer close(s.done)
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				s.confirmed(m.Channel)
			}
		case *redis.Message:
			s.message(m.Channel, m.Payload)
		}
	}
}

func (s *subscriber) confirmed(ch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.chans[ch]
	if st == nil {
		return
	}
	if !st.confirmed {
		st.confirmed = true
		close(st.ready)
	}
	for w := range st.waiters {
		if w.tried.Load() {
			w.notify()
		}
	}
}

func (s *subscriber) message(ch, payload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.chans[ch]
	if st == nil {
		return
	}
	if payload == holderChanged {
		for w := range st.waiters {
			if w.watch {
				w.notify()
			}
		}
		return
	}
	if payload != "" {
		id, grant, handed := strings.Cut(payload, "|")
		if w := s.byID[id]; w != nil && w.st == st {
			if handed {
				w.handed.Store(&grant)
			}
			w.notify()
		}
		return
	}
	for w := range st.waiters {
		w.notify()
	}
}

func (w *waiter) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// register adds a waiter to st; s.mu is held.
func (s *subscriber) register(st *channelState, ch, id string) *waiter {
	w := &waiter{id: id, ch: ch, st: st, wake: make(chan struct{}, 1)}
	st.waiters[w] = struct{}{}
	if id != "" {
		s.byID[id] = w
	}
	return w
}

// addIfSubscribed registers a waiter on ch if ch's subscription is
// confirmed (other waiters, or a lingering subscription), without any
// request; it returns nil otherwise.
func (s *subscriber) addIfSubscribed(ch, id string) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.chans[ch]
	if s.closed || st == nil || !st.confirmed {
		return nil
	}
	return s.register(st, ch, id)
}

// add registers a waiter on ch, subscribing to ch unless it is subscribed
// (or being subscribed) already. It returns the error of a SUBSCRIBE that
// could not be sent: no confirmation is then on its way.
func (s *subscriber) add(ch, id string) (*waiter, error) {
	return s.subscribe(ch, id, false)
}

// addWatcher registers a watcher of the holder of the key whose release
// channel is ch, as add does a waiter.
func (s *subscriber) addWatcher(ch string) (*waiter, error) {
	return s.subscribe(ch, "", true)
}

func (s *subscriber) subscribe(ch, id string, watch bool) (*waiter, error) {
	s.cmdMu.Lock()
	defer s.cmdMu.Unlock()
	s.mu.Lock()
	st := s.chans[ch]
	first := st == nil
	if first {
		st = &channelState{waiters: map[*waiter]struct{}{}, ready: make(chan struct{})}
		s.chans[ch] = st
	}
	w := s.register(st, ch, id)
	w.watch = watch
	s.mu.Unlock()
	if first {
		// An error is not fatal: go-redis subscribes again when it
		// reconnects, and the waiter's fallback timer covers the gap. But
		// when the SUBSCRIBE itself failed to be written, go-redis has
		// reconnected at once and resubscribed the channels it knew of,
		// before adding ch to them: ch has no subscription on the new
		// connection. Subscribing again sends it there (or, should that
		// fail too, lets the next reconnect include ch, which go-redis
		// now knows of).
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		defer cancel()
		if err := s.ps.Subscribe(ctx, ch); err != nil {
			return w, s.ps.Subscribe(ctx, ch)
		}
	}
	return w, nil
}

// remove unregisters w. When it was the channel's last waiter, the channel
// lingers, and is unsubscribed by a timer once it has been idle for the
// linger: not on the caller's path.
func (s *subscriber) remove(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(w.st.waiters, w)
	if w.id != "" && s.byID[w.id] == w {
		delete(s.byID, w.id)
	}
	st := w.st
	if len(st.waiters) > 0 || s.chans[w.ch] != st || s.closed {
		return
	}
	st.idleSince = time.Now()
	if st.expiry == nil {
		st.expiry = time.AfterFunc(s.linger, func() { s.expire(w.ch, st) })
	}
}

// expire unsubscribes from ch if it has been idle for the linger, and
// otherwise waits again (a waiter came and left meanwhile) or stops (a
// waiter is there; the next one to leave restarts the timer).
func (s *subscriber) expire(ch string, st *channelState) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.expires.Add(1)
	s.mu.Unlock()
	defer s.expires.Done()

	s.cmdMu.Lock()
	defer s.cmdMu.Unlock()
	s.mu.Lock()
	if s.closed || s.chans[ch] != st || len(st.waiters) > 0 {
		st.expiry = nil
		s.mu.Unlock()
		return
	}
	if left := s.linger - time.Since(st.idleSince); left > 0 {
		st.expiry = time.AfterFunc(left, func() { s.expire(ch, st) })
		s.mu.Unlock()
		return
	}
	st.expiry = nil
	delete(s.chans, ch)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	_ = s.ps.Unsubscribe(ctx, ch)
	cancel()
}

// close closes the pub/sub connection and waits for the dispatcher and the
// linger timers.
func (s *subscriber) close() error {
	s.mu.Lock()
	s.closed = true
	for _, st := range s.chans {
		if st.expiry != nil {
			st.expiry.Stop()
		}
	}
	s.mu.Unlock()
	err := s.ps.Close()
	s.expires.Wait()
	select {
	case <-s.done:
	case <-time.After(time.Minute):
	}
	return err
}
