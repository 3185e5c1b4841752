package redlock

// The pub/sub connections that the waiters of one Backend share: one per
// node, each subscribed to the Backend's own wake channel. A waiter is a
// member of its key's queue on the nodes ("<backend id>|<waiter id>");
// a release publishes the first live member on its Backend's channel, and
// the Backend wakes that waiter alone. The channel is subscribed once per
// node, by one goroutine per node, so that a waiter never waits on a slow
// or dead node. If a connection breaks, go-redis reconnects and
// subscribes again; the confirmation wakes every waiter of the Backend,
// since wake-ups published meanwhile are lost.

import (
	"context"
	"crypto/rand"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// gaveUpMemory is how long a Backend passes on the wake-ups of a waiter
// that gave up: longer than a release takes to reach a node.
const gaveUpMemory = 10 * time.Second

type subscriber struct {
	pss     []*redis.PubSub
	need    int    // confirmations that make the wake channel ready
	id      string // the Backend's part of its waiters' members
	channel string
	wg      sync.WaitGroup
	ready   chan struct{} // closed once need nodes confirmed

	// mu guards the fields below.
	mu        sync.Mutex
	confirmed map[int]bool
	waiters   map[string]*waiter // by member
	next      uint64
	gaveUp    map[string]time.Time // members that returned without a grant, and when

	// holders are the keys' holder channels that the Backend watches
	// (WatchHolder), by channel, subscribed while watched and for
	// holderLinger after (see holderChannel); sending has the holder
	// channels with a SUBSCRIBE or an UNSUBSCRIBE on its way, each with,
	// by node, a channel closed once the last one sent to that node
	// returned (nil when none is on its way); closed is set by close.
	holders map[string]*holderChannel
	sending map[string][]chan struct{}
	closed  bool

	// gone is told of a wake-up for a waiter that has returned, with the
	// node and the key's queue: it passes the turn on.
	gone func(node int, member, queue string)
}

// waiter is one waiting Acquire: its place in the key's queue on every
// node, and its wake-ups.
type waiter struct {
	sub    *subscriber
	member string // "<backend id>|<waiter id>"
	// ticket orders the queue: the same on every node, so that every
	// node's release wakes the same first waiter.
	ticket int64
	wake   chan struct{} // buffered: a wake-up is never lost or blocking
	// queued is set once a try may have put the waiter in the queue; a
	// grant then takes it out, and giving up removes it.
	queued bool
	// wokeBy has a bit for each node whose release woke the waiter since
	// its last try (guarded by sub.mu).
	wokeBy uint64
	// woke is set when the waiter's next try follows a wake-up.
	woke bool
}

// subscriber returns the Backend's pub/sub multiplexer, creating it.
func (b *Backend) subscriber() (*subscriber, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.sub == nil {
		b.sub = newSubscriber(b.nodes, len(b.nodes)-b.maj+1, b.cfg.prefix+wakeName)
		b.sub.gone = b.passOn
	}
	return b.sub, nil
}

// readySubscriber returns the Backend's multiplexer if its wake channel
// is subscribed on enough nodes already, else nil.
func (b *Backend) readySubscriber() *subscriber {
	b.mu.Lock()
	s := b.sub
	b.mu.Unlock()
	if s == nil {
		return nil
	}
	select {
	case <-s.ready:
		return s
	default:
		return nil
	}
}

func newSubscriber(nodes []Node, need int, channelPrefix string) *subscriber {
	id := rand.Text()
	s := &subscriber{
		need: need, id: id, channel: channelPrefix + id, ready: make(chan struct{}),
		confirmed: map[int]bool{}, waiters: map[string]*waiter{}, gaveUp: map[string]time.Time{},
		holders: map[string]*holderChannel{}, sending: map[string][]chan struct{}{},
	}
	for i, n := range nodes {
		ps := n.Subscribe(context.Background())
		s.pss = append(s.pss, ps)
		msgs := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
		s.wg.Add(2)
		go s.dispatch(i, msgs)
		go func() {
			defer s.wg.Done()
			// go-redis keeps the channel even when this first SUBSCRIBE
			// fails, and subscribes again once it reconnects.
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			defer cancel()
			_ = ps.Subscribe(ctx, s.channel)
		}()
	}
	return s
}

func (s *subscriber) dispatch(node int, msgs <-chan any) {
	defer s.wg.Done()
	for m := range msgs {
		switch m := m.(type) {
		case *redis.Subscription:
			switch {
			case m.Kind != "subscribe":
			case m.Channel == s.channel:
				s.confirm(node)
			default:
				s.confirmHolder(m.Channel, node)
			}
		case *redis.Message:
			if m.Channel == s.channel {
				s.notify(m.Payload, node)
			} else {
				s.holderChanged(m.Channel)
			}
		}
	}
}

func (s *subscriber) confirm(node int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.confirmed[node] {
		// A resubscription after a reconnect: wake-ups may have been missed.
		for _, w := range s.waiters {
			w.wokeBy = ^uint64(0)
			w.notify()
		}
		return
	}
	s.confirmed[node] = true
	if len(s.confirmed) == s.need {
		close(s.ready)
	}
}

// notify wakes the waiter member, if it still waits. A wake-up for a
// waiter that has returned is dropped: that release's node woke nobody
// else, but the other nodes of the release woke the next waiter, and the
// waiters' fallback timers cover the rest.
func (s *subscriber) notify(payload string, node int) {
	member, queue, _ := strings.Cut(payload, " ")
	if !strings.HasPrefix(member, s.id+"|") {
		return
	}
	s.mu.Lock()
	w := s.waiters[member]
	if w != nil {
		w.wokeBy |= 1 << (node % 64)
		w.notify()
	}
	_, gaveUp := s.gaveUp[member]
	s.mu.Unlock()
	// A waiter that returned with a grant needs nothing passed on: the
	// key is held, and its holder's release wakes the next waiter.
	if gaveUp && s.gone != nil {
		s.gone(node, member, queue)
	}
}

// woken is how many nodes have woken w since the last call, which starts
// counting again.
func (s *subscriber) woken(w *waiter, reset bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := bits.OnesCount64(w.wokeBy)
	if reset {
		w.wokeBy = 0
	}
	return n
}

func (w *waiter) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// add registers a new waiter, with a ticket from the clock: waiters are
// queued in about the order they started waiting.
func (s *subscriber) add() *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	w := &waiter{sub: s, member: s.id + "|" + strconv.FormatUint(s.next, 10), ticket: time.Now().UnixMicro(), wake: make(chan struct{}, 1)}
	s.waiters[w.member] = w
	return w
}

// remove unregisters w; gaveUp says it returned without a grant, so
// that a wake-up still on its way is passed on to the next waiter.
// Waiters that gave up are remembered for gaveUpMemory. It returns the
// nodes that woke w since its last try (a bit per node): their wake-ups
// reached w, which will not act on them.
func (s *subscriber) remove(w *waiter, gaveUp bool) (wokeBy uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiters, w.member)
	if !gaveUp {
		return 0
	}
	now := time.Now()
	for m, at := range s.gaveUp {
		if now.Sub(at) > gaveUpMemory {
			delete(s.gaveUp, m)
		}
	}
	s.gaveUp[w.member] = now
	return w.wokeBy
}

// close closes the pub/sub connections and waits for the goroutines.
func (s *subscriber) close() error {
	s.mu.Lock()
	s.closed = true
	for _, hc := range s.holders {
		if hc.expiry != nil {
			hc.expiry.Stop()
		}
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

// passOn passes the turn of a woken waiter that has returned to the next
// waiter on node, in the background: the node woke nobody else, and
// its release kept the node for that waiter.
func (b *Backend) passOn(node int, member, queue string) {
	base, ok := strings.CutSuffix(queue, suffixQueue)
	if !ok || !strings.HasPrefix(base, b.cfg.prefix+"{") || !b.track() {
		return
	}
	k := lockKeys{base: base, lock: base + suffixLock, queue: queue, waiting: base + suffixWaiting, woken: base + suffixWoken}
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithTimeout(b.closing, cleanupTimeout)
		defer cancel()
		_ = passScript.Run(ctx, b.nodes[node], []string{k.lock, k.waiting, k.queue, k.woken}, member, b.cfg.prefix+wakeName, ceilMillis(maxReserve)).Err()
	}()
}

// track counts one more background goroutine in b.wg, unless the Backend
// is closed (Close waits for them).
func (b *Backend) track() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	return true
}
