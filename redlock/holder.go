package redlock

// The holder of one key, as a majority of the nodes have it, and a watch
// of it.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.HolderReader  = (*Backend)(nil)
	_ driver.HolderWatcher = (*Backend)(nil)
)

// Holder implements driver.HolderReader with the view of List: it reads
// key's lock key (and its PTTL) on every node in parallel, and reports the
// grant a majority of the nodes hold, with List's Token, Since and
// Expires. It waits for the nodes as List does, and fails when fewer than
// a majority answer.
func (b *Backend) Holder(ctx context.Context, key string) (driver.Holder, bool, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Holder{}, false, err
	}
	rk := []string{b.keysFor(key).lock}
	now := time.Now()
	q := quorum[[]nodeGrant]{straggle: listStraggle, decided: listDecided(b.maj)}
	res := eachQuorum(ctx, b, b.cfg.listTimeout(), q, func(ctx context.Context, n Node) ([]nodeGrant, error) {
		return b.peekGrants(ctx, n, rk)
	})
	hs, err := b.majorityHolders("holder", res, now)
	if err != nil {
		if ctx.Err() != nil {
			return driver.Holder{}, false, ctx.Err()
		}
		return driver.Holder{}, false, err
	}
	for _, h := range hs {
		if h.Key == key {
			return h, true, nil
		}
	}
	return driver.Holder{}, false, nil
}

// watchMarkerTTL is the lifetime of a key's watch marker on a node, which
// a watching Backend sets again every third of it.
const watchMarkerTTL = 30 * time.Second

// remarkPeriod is how often a watch sets its marker again.
func (b *Backend) remarkPeriod() time.Duration {
	if b.hooks.remark > 0 {
		return b.hooks.remark
	}
	return watchMarkerTTL / 3
}

// WatchHolder implements driver.HolderWatcher with the key's holder
// channel and watch marker on every node: while the marker exists on a
// node, the node publishes on the channel when its grant of the key
// changes (a grant, a release, a raised token). The subscriptions share
// the pub/sub connections of the Backend's waiters. WatchHolder returns
// once enough nodes confirmed the subscription and hold the marker that
// every majority has one of them (one more than the nodes a majority
// leaves out: a majority, of an odd number of nodes), waiting at most
// driver.ConfirmWait, so that a new grant of the majority view is
// announced by one of them: a node down does not keep the watch from
// being woken by the others. It fails with an error matching
// ErrUnavailable when too few did, and the watcher then polls. The
// marker is set again on every node every 10s while the watch lasts, and
// the watch ends when too few nodes then hold it. A confirmation sent
// again after a reconnection, or a node's first, wakes the watcher, since
// what was published meanwhile is lost. A grant that lapses is not
// announced, nor a release that reached only the nodes not heard: the
// watcher reads again at the grant's Expires. The Backend stays
// subscribed to a key's channel while it is watched, and for
// holderLinger after, so that watches that follow each other subscribe
// once. The watch ends when ctx ends or the Backend is closed; Close
// waits for it.
func (b *Backend) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	sub, err := b.subscriber()
	if err != nil {
		return nil, err
	}
	k := b.keysFor(key)
	ch := k.base + suffixHolder
	w := sub.addWatch(ch)
	confirm := time.NewTimer(driver.ConfirmWait)
	defer confirm.Stop()
	select {
	case <-w.ready:
	case <-ctx.Done():
		sub.removeWatch(ch, w)
		return nil, ctx.Err()
	case <-b.closing.Done():
		sub.removeWatch(ch, w)
		return nil, ErrClosed
	case <-confirm.C:
		sub.removeWatch(ch, w)
		return nil, fmt.Errorf("%w: redlock: watch holder: fewer than %d nodes confirmed the subscription within %v", driver.ErrUnavailable, sub.need, driver.ConfirmWait)
	}
	// mark sets the marker on every node, and reports whether every node
	// heard from (confirmed, and marked now) had it; it fails when too few
	// nodes are heard from.
	mark := func(ctx context.Context) (bool, error) {
		res := each(ctx, b, nil, b.cfg.listTimeout(), func(ctx context.Context, n Node) (bool, error) {
			had, err := watchScript.Run(ctx, n, []string{k.watched}, watchMarkerTTL.Milliseconds()).Int()
			return had == 1, err
		})
		confirmed := sub.confirmedHolder(ch)
		why := make([]string, len(res))
		heard, every := 0, true
		for i, r := range res {
			switch {
			case r.err != nil:
				why[i] = r.err.Error()
			case confirmed[i]:
				heard++
				every = every && r.val
			}
		}
		if heard < sub.need {
			return false, fmt.Errorf("%w: redlock: watch holder: the watch marker is set on %d confirmed nodes, fewer than %d: %s", driver.ErrUnavailable, heard, sub.need, b.nodeErrors(why))
		}
		return every, nil
	}
	if _, err := mark(ctx); err != nil {
		sub.removeWatch(ch, w)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	// The watch's goroutine is one that Close waits for, so that nothing
	// of the watch uses the nodes after Close returns.
	if !b.track() {
		sub.removeWatch(ch, w)
		return nil, ErrClosed
	}
	out := make(chan struct{}, 1)
	go func() {
		defer b.wg.Done()
		defer close(out)
		defer sub.removeWatch(ch, w)
		// A re-mark under way ends with the watch, so that Close does
		// not wait for it.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(b.closing, cancel)
		defer stop()
		remark := time.NewTicker(b.remarkPeriod())
		defer remark.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-remark.C:
				all, err := mark(ctx)
				if err != nil {
					return // the marker may lapse: the watcher watches again
				}
				if !all {
					// A node lost the marker: its grants since were not
					// announced. The watcher reads again.
					select {
					case out <- struct{}{}:
					default:
					}
				}
			case <-w.wake:
				select {
				case out <- struct{}{}:
				default: // one is pending already
				}
			}
		}
	}()
	return out, nil
}

// holderLinger is how long a holder channel stays subscribed after its
// last watcher left: Observe sets its watch again after each end of one,
// and a subscription is a request to every node.
const holderLinger = time.Second

// holderChannel is one key's holder channel: the nodes that confirmed
// its subscription, and its watchers. With no watcher left, it lingers:
// idleSince is when the last one left, and expiry (when not nil) the
// timer that unsubscribes once it has been idle for holderLinger.
// Guarded by subscriber.mu.
type holderChannel struct {
	confirmed map[int]bool
	watchers  map[*holderWatch]struct{}
	idleSince time.Time
	expiry    *time.Timer
}

// holderWatch is one WatchHolder.
type holderWatch struct {
	wake    chan struct{} // buffered: a wake-up is never lost or blocking
	ready   chan struct{} // closed once enough nodes confirmed
	isReady bool
}

func (w *holderWatch) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// addWatch registers a watcher of the holder channel ch, subscribing to
// ch on every node unless it is subscribed already.
func (s *subscriber) addWatch(ch string) *holderWatch {
	w := &holderWatch{wake: make(chan struct{}, 1), ready: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	hc := s.holders[ch]
	first := hc == nil
	if first {
		hc = &holderChannel{confirmed: map[int]bool{}, watchers: map[*holderWatch]struct{}{}}
		s.holders[ch] = hc
	}
	hc.watchers[w] = struct{}{}
	if len(hc.confirmed) >= s.need {
		w.isReady = true
		close(w.ready)
	}
	if first && !s.closed {
		// As for the wake channel: go-redis subscribes again when it
		// reconnects, should this fail.
		s.sendLocked(ch, (*redis.PubSub).Subscribe)
	}
	return w
}

// sendLocked sends op (a SUBSCRIBE or an UNSUBSCRIBE) of the holder
// channel ch to every node, each after the operations of ch already
// sent to that node: each node gets them in the order they were decided
// (under s.mu), so that it ends subscribed exactly when ch is watched
// or lingers, and a node that does not answer holds up only its own.
// The caller holds s.mu.
func (s *subscriber) sendLocked(ch string, op func(ps *redis.PubSub, ctx context.Context, channels ...string) error) {
	tails := s.sending[ch]
	if tails == nil {
		tails = make([]chan struct{}, len(s.pss))
		s.sending[ch] = tails
	}
	s.wg.Add(len(s.pss))
	for i, ps := range s.pss {
		prev, done := tails[i], make(chan struct{})
		tails[i] = done
		go func() {
			defer s.wg.Done()
			if prev != nil {
				<-prev
			}
			ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
			_ = op(ps, ctx, ch)
			cancel()
			s.mu.Lock()
			if t := s.sending[ch]; t != nil && t[i] == done {
				t[i] = nil
				if !slices.ContainsFunc(t, func(c chan struct{}) bool { return c != nil }) {
					delete(s.sending, ch)
				}
			}
			s.mu.Unlock()
			close(done)
		}()
	}
}

// removeWatch unregisters w. When it was the channel's last watcher, the
// channel lingers, and is unsubscribed by a timer once it has been idle
// for holderLinger: not on the caller's path.
func (s *subscriber) removeWatch(ch string, w *holderWatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hc := s.holders[ch]
	if hc == nil {
		return
	}
	delete(hc.watchers, w)
	if len(hc.watchers) > 0 || s.closed {
		return
	}
	hc.idleSince = time.Now()
	if hc.expiry == nil {
		hc.expiry = time.AfterFunc(holderLinger, func() { s.expireHolder(ch, hc) })
	}
}

// expireHolder unsubscribes from ch on every node if it has been idle for
// holderLinger, and otherwise waits again (a watcher came and left
// meanwhile) or stops (a watcher is there; the next one to leave starts
// the timer again).
func (s *subscriber) expireHolder(ch string, hc *holderChannel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.holders[ch] != hc || len(hc.watchers) > 0 {
		hc.expiry = nil
		return
	}
	if left := holderLinger - time.Since(hc.idleSince); left > 0 {
		hc.expiry = time.AfterFunc(left, func() { s.expireHolder(ch, hc) })
		return
	}
	hc.expiry = nil
	delete(s.holders, ch)
	s.sendLocked(ch, (*redis.PubSub).Unsubscribe)
}

// confirmedHolder returns the nodes that confirmed the holder channel ch.
func (s *subscriber) confirmedHolder(ch string) map[int]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	hc := s.holders[ch]
	if hc == nil {
		return nil
	}
	return maps.Clone(hc.confirmed)
}

// confirmHolder counts node's confirmation of the holder channel ch. The
// watchers become ready once need nodes confirmed: every majority then
// holds one of them, so every change of the holder (a grant or release on
// a majority) is announced on a node heard. A ready watcher is woken by a
// node's confirmation again (it reconnected: it may have taken part in a
// change while it was not heard), not by a node heard for the first time,
// whose changes the nodes heard all along announced too (waking the
// watcher for it made a Watch read the holder again for nothing, seconds
// after its first read when a node's reply was slow).
func (s *subscriber) confirmHolder(ch string, node int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hc := s.holders[ch]
	if hc == nil {
		return
	}
	again := hc.confirmed[node]
	hc.confirmed[node] = true
	for w := range hc.watchers {
		switch {
		case w.isReady:
			if again {
				w.notify()
			}
		case len(hc.confirmed) >= s.need:
			w.isReady = true
			close(w.ready)
		}
	}
}

// holderChanged wakes the watchers of the holder channel ch.
func (s *subscriber) holderChanged(ch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hc := s.holders[ch]; hc != nil {
		for w := range hc.watchers {
			w.notify()
		}
	}
}
