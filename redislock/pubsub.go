package redislock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriber multiplexes the waiters of one Backend over one pub/sub
// connection: a channel is subscribed while at least one waiter waits on it.
// Messages wake the waiters of their channel (all of them, or the one whose
// id is the payload in fair mode). A subscription confirmation wakes the
// channel's waiters that have already tried: it is sent again after go-redis
// reconnects, and releases published while disconnected are lost.
type subscriber struct {
	ps   *redis.PubSub
	done chan struct{} // closed when the dispatch goroutine exits

	// cmdMu orders SUBSCRIBE and UNSUBSCRIBE commands like the state
	// changes that caused them; it is held while sending, mu is not.
	cmdMu sync.Mutex

	mu    sync.Mutex
	chans map[string]*channelState
	byID  map[string]*waiter // fair-mode waiters by id
}

type channelState struct {
	waiters   map[*waiter]struct{}
	ready     chan struct{} // closed at the first confirmation
	confirmed bool
}

type waiter struct {
	id    string
	ch    string
	st    *channelState
	wake  chan struct{} // buffered: a wake-up is never lost or blocking
	tried atomic.Bool   // the waiter has sent a try since subscribing
}

func newSubscriber(client redis.UniversalClient) *subscriber {
	ps := client.Subscribe(context.Background())
	s := &subscriber{ps: ps, done: make(chan struct{}),
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
	if payload != "" {
		if w := s.byID[payload]; w != nil && w.st == st {
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

// add registers a waiter on ch, subscribing to ch if it is the first.
func (s *subscriber) add(ch, id string) *waiter {
	s.cmdMu.Lock()
	defer s.cmdMu.Unlock()
	s.mu.Lock()
	st := s.chans[ch]
	first := st == nil
	if first {
		st = &channelState{waiters: map[*waiter]struct{}{}, ready: make(chan struct{})}
		s.chans[ch] = st
	}
	w := &waiter{id: id, ch: ch, st: st, wake: make(chan struct{}, 1)}
	st.waiters[w] = struct{}{}
	if id != "" {
		s.byID[id] = w
	}
	s.mu.Unlock()
	if first {
		// An error is not fatal: go-redis subscribes again when it
		// reconnects, and the waiter's fallback timer covers the gap.
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		_ = s.ps.Subscribe(ctx, ch)
		cancel()
	}
	return w
}

// remove unregisters w, unsubscribing from its channel if it was the last.
func (s *subscriber) remove(w *waiter) {
	s.cmdMu.Lock()
	defer s.cmdMu.Unlock()
	s.mu.Lock()
	delete(w.st.waiters, w)
	if w.id != "" {
		delete(s.byID, w.id)
	}
	last := len(w.st.waiters) == 0 && s.chans[w.ch] == w.st
	if last {
		delete(s.chans, w.ch)
	}
	s.mu.Unlock()
	if last {
		ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
		_ = s.ps.Unsubscribe(ctx, w.ch)
		cancel()
	}
}

// close closes the pub/sub connection and waits for the dispatcher.
func (s *subscriber) close() error {
	err := s.ps.Close()
	select {
	case <-s.done:
	case <-time.After(time.Minute):
	}
	return err
}
