package redlock

// The pub/sub connections that the waiters of one Backend share: one per
// node. A waiter registers on its key's release channel; the channel is
// subscribed on every node while it has waiters. A release publishes on
// every node that held the grant, so a waiter subscribed on more than
// N - majority nodes hears of it. Subscriptions are sent by one goroutine
// per node, in order, so that a waiter never waits on a slow or dead node
// and a SUBSCRIBE never overtakes the UNSUBSCRIBE before it. If a
// connection breaks, go-redis reconnects and subscribes again; the
// confirmation wakes the channel's waiters, since releases published
// meanwhile are lost.

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

type subscriber struct {
	pss   []*redis.PubSub
	need  int // confirmations that make a channel ready
	wg    sync.WaitGroup
	kicks []chan struct{} // one per node's command goroutine, buffered

	// mu guards the fields below, every channelState and its waiters.
	mu      sync.Mutex
	closed  bool
	chans   map[string]*channelState
	pending [][]subCmd // per node, commands not yet sent
}

type subCmd struct {
	ch  string
	sub bool
}

type channelState struct {
	waiters   map[*waiter]struct{}
	confirmed map[int]bool
	ready     chan struct{} // closed once need nodes confirmed
}

type waiter struct {
	sub   *subscriber
	ch    string
	st    *channelState
	ready <-chan struct{}
	wake  chan struct{} // buffered: a wake-up is never lost or blocking
}

// subscriber returns the Backend's pub/sub multiplexer, creating it.
func (b *Backend) subscriber() (*subscriber, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.sub == nil {
		b.sub = newSubscriber(b.nodes, len(b.nodes)-b.maj+1)
	}
	return b.sub, nil
}

func newSubscriber(nodes []Node, need int) *subscriber {
	s := &subscriber{need: need, chans: map[string]*channelState{}, pending: make([][]subCmd, len(nodes))}
	for i, n := range nodes {
		ps := n.Subscribe(context.Background())
		s.pss = append(s.pss, ps)
		kick := make(chan struct{}, 1)
		s.kicks = append(s.kicks, kick)
		msgs := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
		s.wg.Add(2)
		go s.dispatch(i, msgs)
		go s.send(i, kick)
	}
	return s
}

func (s *subscriber) dispatch(node int, msgs <-chan any) {
	defer s.wg.Done()
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				s.confirmed(node, m.Channel)
			}
		case *redis.Message:
			s.notify(m.Channel)
		}
	}
}

// send sends node's queued commands, in order, until the subscriber is
// closed.
func (s *subscriber) send(node int, kick <-chan struct{}) {
	defer s.wg.Done()
	for range kick {
		for {
			s.mu.Lock()
			if s.closed || len(s.pending[node]) == 0 {
				closed := s.closed
				s.mu.Unlock()
				if closed {
					return
				}
				break
			}
			c := s.pending[node][0]
			s.pending[node] = s.pending[node][1:]
			s.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			if c.sub {
				_ = s.pss[node].Subscribe(ctx, c.ch)
			} else {
				_ = s.pss[node].Unsubscribe(ctx, c.ch)
			}
			cancel()
		}
	}
}

// queue adds a command for every node; s.mu is held.
func (s *subscriber) queue(c subCmd) {
	for i := range s.pending {
		s.pending[i] = append(s.pending[i], c)
		select {
		case s.kicks[i] <- struct{}{}:
		default:
		}
	}
}

func (s *subscriber) confirmed(node int, ch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.chans[ch]
	if st == nil {
		return
	}
	if st.confirmed[node] {
		// A resubscription after a reconnect: releases may have been missed.
		for w := range st.waiters {
			w.notify()
		}
		return
	}
	st.confirmed[node] = true
	if len(st.confirmed) == s.need {
		close(st.ready)
	}
}

func (s *subscriber) notify(ch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.chans[ch]; st != nil {
		for w := range st.waiters {
			w.notify()
		}
	}
}

func (w *waiter) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// add registers a waiter on ch, subscribing to ch on every node unless it
// is subscribed already. w.ready is closed once enough nodes confirmed.
func (s *subscriber) add(ch string) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.chans[ch]
	if st == nil {
		st = &channelState{waiters: map[*waiter]struct{}{}, confirmed: map[int]bool{}, ready: make(chan struct{})}
		s.chans[ch] = st
		if !s.closed {
			s.queue(subCmd{ch: ch, sub: true})
		}
	}
	w := &waiter{sub: s, ch: ch, st: st, ready: st.ready, wake: make(chan struct{}, 1)}
	st.waiters[w] = struct{}{}
	return w
}

// remove unregisters w, unsubscribing from its channel when it was the
// last waiter.
func (s *subscriber) remove(w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(w.st.waiters, w)
	if len(w.st.waiters) > 0 || s.chans[w.ch] != w.st {
		return
	}
	delete(s.chans, w.ch)
	if !s.closed {
		s.queue(subCmd{ch: w.ch})
	}
}

// close closes the pub/sub connections and waits for the goroutines.
func (s *subscriber) close() error {
	s.mu.Lock()
	s.closed = true
	for _, k := range s.kicks {
		close(k)
	}
	s.mu.Unlock()
	var err error
	for _, ps := range s.pss {
		if e := ps.Close(); e != nil && err == nil {
			err = e
		}
	}
	s.wg.Wait()
	return err
}
