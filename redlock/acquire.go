package redlock

// Acquire: one round of votes on every node, the token of a grant, and
// the waiting loop around rounds.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

const (
	// noExpiryPoll is the fallback re-check interval while a lock key has
	// no expiry (set by something else than this package).
	noExpiryPoll = time.Second
	// maxPendingPoll bounds the sleep of a waiter that waits for nodes to
	// be re-seeded.
	maxPendingPoll = time.Second
	// queueSlack is how long a key's queue outlives the PTTL of the grant
	// that a waiter found: longer than any sleep of a waiter between two
	// tries (noExpiryPoll, maxPendingPoll, the split backoff's cap) plus a
	// round, so that the queue is there while its waiters wait.
	queueSlack = 3 * time.Second
	// gatherWait bounds how long a woken waiter waits for a majority of
	// the nodes of the release to wake it before it tries anyway (their
	// queues may have another waiter first); well within a release's
	// reservation (maxReserve).
	gatherWait = 20 * time.Millisecond
)

// splitBackoff paces the rounds of a waiter after a split vote (no
// majority for anyone): full jitter, so that the clients that split one
// round do not meet again in the next.
var splitBackoff = driver.ExponentialBackoff(5*time.Millisecond, 500*time.Millisecond)

// Acquire implements driver.Backend. A try is one round of votes: the
// acquire script on every node in parallel, each bounded by the per-node
// timeout. It is granted with a majority of votes and validity left (the
// TTL less the time since the round's first request and the drift), and
// costs a second round only when the votes' counters disagree (see
// Fencing in the package documentation). A try that is not granted
// releases what it got at once. A waiting Acquire whose try finds the key
// held joins the key's queue on the nodes and tries again when a release
// wakes it (a release wakes one waiter), when enough holders' grants have
// expired, or after a split vote, after a backoff with full jitter.
func (b *Backend) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	if err := b.cfg.checkTTL(opts.TTL); err != nil {
		return nil, err
	}
	if b.isClosed() {
		return nil, ErrClosed
	}
	k := b.keysFor(key)
	if opts.Wait {
		return b.wait(ctx, k, opts)
	}
	l, r, err := b.try(ctx, k, opts, nil)
	switch {
	case ctx.Err() != nil:
		return nil, driver.Canceled(ctx)
	case err != nil:
		return nil, err
	case l == nil:
		return nil, fmt.Errorf("%w: redlock: %s", driver.ErrNotAcquired, r.why)
	}
	return l, nil
}

// vote is one node's reply to acquire.lua. late says that it came
// settleWindow or more after the round's first request was sent: the
// node's counter then does not count towards settling the token without
// the raising round (see grant).
type vote struct {
	status, val int64
	late        bool
}

// refusal is why a try was not granted, and when to try again.
type refusal struct {
	why     string
	split   bool          // nobody has a majority: back off with jitter
	retryIn time.Duration // otherwise
}

// round is what the votes of one round say, by node index.
type round struct {
	granted  []int // nodes that voted for this try
	held     []int64
	reserved []int    // indexes in held of reservations (their PTTL)
	why      []string // why a node did not vote; "" for a node that voted or refused
	// The nodes by their seed marker (see seed.go): normal ones vote
	// ("ok"); copied ones wait with their counters copied; due ones wait
	// for the copy of theirs; unseeded ones have no marker. marked counts
	// the nodes that have one.
	normal, copied, due, unseeded []int
	marked                        int
	// waitOf is, by node index, the start of the wait of a node of due:
	// the copy applies to that wait only.
	waitOf []int64
}

// countVotes sorts the votes of a round.
func countVotes(votes []reply[vote]) round {
	r := round{why: make([]string, len(votes)), waitOf: make([]int64, len(votes))}
	for i, v := range votes {
		if v.err != nil {
			r.why[i] = v.err.Error()
			continue
		}
		switch v.val.status {
		case voteGranted:
			r.granted = append(r.granted, i)
			r.normal = append(r.normal, i)
		case voteHeld:
			r.held = append(r.held, v.val.val)
			r.normal = append(r.normal, i)
		case voteReserved:
			r.reserved = append(r.reserved, len(r.held))
			r.held = append(r.held, v.val.val)
			r.normal = append(r.normal, i)
		case voteTooLate:
			r.why[i] = "the request came after its attempt was cleaned up"
			r.normal = append(r.normal, i)
		case voteUnseeded:
			r.why[i] = "lost its data (no seed marker); it does not vote until re-seeded"
			r.unseeded = append(r.unseeded, i)
		case votePending:
			r.why[i] = fmt.Sprintf("lost its data; it does not vote for %v more at least", time.Duration(v.val.val)*time.Millisecond)
			r.marked++
		case voteCopyDue:
			r.why[i] = "lost its data; its counters are being copied, then it waits until it may vote"
			r.due = append(r.due, i)
			r.waitOf[i] = v.val.val
		case voteCopied:
			r.why[i] = fmt.Sprintf("lost its data; its counters were copied, and it votes in %v", time.Duration(v.val.val)*time.Millisecond)
			r.copied = append(r.copied, i)
		case voteBadMarker:
			r.why[i] = "its seed marker is not one this package writes; it does not vote"
		default:
			r.why[i] = fmt.Sprintf("unexpected acquire reply %d", v.val.status)
		}
	}
	r.marked += len(r.normal) + len(r.copied) + len(r.due)
	return r
}

// settleWindow bounds how long after a round's first request the replies
// that settle a token may come: a token is handed out only when a
// majority of the nodes reported, in one round and within settleWindow
// of its first request, a counter of at least the token while they held
// the grant. A node that lost its data is copied no earlier than
// settleWindow (and the drift) after it was found so: by then every token
// that counted its old counter is settled on nodes that the copy reads
// (see Durability in the package documentation).
const settleWindow = time.Second

// pickToken is the token of a grant whose voters (granted, indexes in
// votes) reported counters: their maximum T, and whether a majority of
// maj reported T itself in time (not late), which settles T without the
// raising round.
func pickToken(votes []reply[vote], granted []int, maj int) (T int64, enough bool) {
	for _, i := range granted {
		T = max(T, votes[i].val.val)
	}
	at := 0
	for _, i := range granted {
		if v := votes[i].val; v.val == T && !v.late {
			at++
		}
	}
	return T, at >= maj
}

// try runs one round, and when it is granted with disagreeing counters the
// raising round. A round that finds nodes without their data starts or
// completes their re-seeding in the background; a refused one waits for
// it (within ctx) when the nodes it may let vote could grant the try, and
// when they vote at once, runs one more round.
func (b *Backend) try(ctx context.Context, k lockKeys, opts driver.AcquireOptions, w *waiter) (*lease, refusal, error) {
	timeout := b.cfg.timeoutFor(opts.TTL)
	ttlMillis := ceilMillis(opts.TTL)
	// A waiter joins the key's queue on every node that is held, and
	// leaves it on every node that grants.
	slack, member, ticket, queued := int64(0), "", int64(0), "0"
	if w != nil {
		slack, member, ticket = ceilMillis(queueSlack), w.member, w.ticket
		if w.queued {
			queued = "1"
		}
	}
	for pass := 0; ; pass++ {
		c := k.credential(newSecret())
		if b.hooks.secret != nil {
			s, _ := c.secret.MarshalBinary()
			b.hooks.secret(string(s))
		}
		sent := time.Now()
		keys := []string{k.lock, k.token, c.tomb, b.marker(), k.queue, k.waiting, k.woken, k.watched}
		// A try waits for every node's vote, whatever the first ones say:
		// a refusal returned at a majority's "held" left the votes still
		// on their way to grant the try late, on the nodes where the key
		// was free, until a clean-up in the background. The caller's next
		// try, or another client's, then found those nodes held by it, or
		// was granted there with their counters a step ahead of the
		// others'; the votes of a later grant disagreed, its token was
		// raised, and Holder, reading a majority of its nodes before the
		// raise, reported a token that no lease has. A refused try cleans
		// up every node that granted it (abandon, below) before it returns.
		votes := each(ctx, b, nil, timeout, func(ctx context.Context, n Node) (vote, error) {
			res, err := acquireScript.Run(ctx, n, keys, &c.secret, ttlMillis, opts.Owner, slack, member, ticket, queued).Int64Slice()
			if err != nil {
				return vote{}, err
			}
			if len(res) != 2 {
				return vote{}, fmt.Errorf("redlock: unexpected acquire reply %v", res)
			}
			return vote{status: res[0], val: res[1], late: time.Since(sent) >= settleWindow}, nil
		})
		r := countVotes(votes)
		if len(r.normal) > 0 && !b.sawVoting.Load() {
			b.sawVoting.Store(true) // see seed
		}
		if len(r.granted) >= b.maj {
			if l, ok := b.grant(ctx, k, c, sent, opts, votes, r); ok {
				l.member = member
				if len(r.unseeded) > 0 || len(r.due) > 0 {
					b.seedLater(r) // the holder does not wait for it
				}
				return l, refusal{}, nil
			}
		}
		// The clean-up is sent whatever becomes of the caller.
		b.abandon(context.WithoutCancel(ctx), k, c, sent, opts.TTL, votes)
		if len(r.unseeded) > 0 || len(r.due) > 0 {
			// The marking and the copy run in the background, as after a
			// grant, whatever becomes of the caller (a process that exits
			// right after a refusal gives them Close's wait). The try
			// waits for them, within ctx, only where the nodes they may
			// let vote could turn the refusal into a grant: a new
			// deployment's first round, a copy onto a node whose wait is
			// over. A copy may scan every counter of a majority.
			seeded := b.seedLater(r)
			if pass == 0 && len(r.granted)+len(r.unseeded)+len(r.due) >= b.maj {
				select {
				case voting := <-seeded:
					if voting && ctx.Err() == nil {
						continue
					}
				case <-ctx.Done():
				}
			}
		}
		if ctx.Err() != nil {
			return nil, refusal{}, driver.Canceled(ctx)
		}
		switch {
		case len(r.granted) >= b.maj:
			return nil, refusal{}, fmt.Errorf("%w: redlock: a majority granted, but its token was not settled in time (a majority at the token within %v of a round's first request, with validity left)", driver.ErrUnavailable, settleWindow)
		case len(r.granted)+len(r.held) < b.maj:
			return nil, refusal{}, b.unavailable("acquire", len(r.granted)+len(r.held), r.why)
		case len(r.held) > len(b.nodes)-b.maj:
			return nil, refusal{why: "held", retryIn: b.expiryWait(b.patience(r, w, opts.TTL))}, nil
		default:
			return nil, refusal{why: fmt.Sprintf("split vote: %d of %d nodes granted, %d held by others", len(r.granted), len(b.nodes), len(r.held)), split: true}, nil
		}
	}
}

// errStraggler is the reply, for its round, of a node that had not
// answered when a majority decided a refresh or a release (see eachUntil).
var errStraggler = fmt.Errorf("%w: no answer yet when the round was decided by a majority", driver.ErrUnavailable)

// grant completes a round that a majority granted: it settles the token
// and checks that validity remains. When the votes do not settle it (a
// majority at T, in time), the raising round sends raise.lua to every
// voter, those at T included: each raises its counter to T or confirms
// it, while it holds the grant, and the replies that count all come from
// that round, within settleWindow of its first request. So every
// contribution to a token comes within settleWindow of another's (see
// settleWindow), and a round that had to wait for a slow node does not
// make the raising round's replies late.
func (b *Backend) grant(ctx context.Context, k lockKeys, c *credential, sent time.Time, opts driver.AcquireOptions, votes []reply[vote], r round) (*lease, bool) {
	T, enough := pickToken(votes, r.granted, b.maj)
	if T <= 0 {
		return nil, false
	}
	if !enough {
		rsent := time.Now()
		raised := each(ctx, b, r.granted, b.cfg.timeoutFor(opts.TTL), func(ctx context.Context, n Node) (int64, error) {
			v, err := raiseScript.Run(ctx, n, []string{k.lock, k.token}, &c.secret, T).Int64()
			if err == nil && time.Since(rsent) >= settleWindow {
				return nodeLate, nil
			}
			return v, err
		})
		at := 0
		for _, i := range r.granted {
			if raised[i].err == nil && raised[i].val == nodeKept {
				at++
			}
		}
		if at < b.maj {
			return nil, false
		}
	}
	if time.Since(sent)+drift(opts.TTL) >= opts.TTL {
		return nil, false
	}
	return &lease{b: b, k: k, c: c, token: uint64(T), validity: driver.Validity{Sent: sent, TTL: opts.TTL}}, true
}

// patience is the PTTLs of the held nodes of round r as waiter w waits
// for them. A node kept for a waiter that a release woke counts as held
// by a grant of w's own TTL, which that waiter is about to take, for a
// queued waiter that was not woken: its turn comes with a release, not
// when the reservation ends, and retrying then would only find the
// woken waiter's grant. A woken waiter (or a try that could not queue)
// waits for the reservation itself: where the nodes' queues disagree and
// reserve nodes for different woken waiters, it is those waiters'
// retries, once the reservations end, that go on.
func (b *Backend) patience(r round, w *waiter, ttl time.Duration) []int64 {
	if w == nil || w.woke || len(r.reserved) == 0 {
		return r.held
	}
	held := append([]int64(nil), r.held...)
	for _, j := range r.reserved {
		held[j] = ceilMillis(ttl)
	}
	return held
}

// expiryWait is how long until enough of the holders' grants (PTTLs held)
// have expired for a majority to be free.
func (b *Backend) expiryWait(held []int64) time.Duration {
	sorted := append([]int64(nil), held...)
	for i := range sorted { // insertion sort: a handful of nodes
		for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	k := len(held) - (len(b.nodes) - b.maj) // grants that must expire
	if k < 1 {
		k = 1
	}
	p := sorted[k-1]
	if sorted[0] < 0 || p < 0 {
		return noExpiryPoll
	}
	return time.Duration(p+1) * time.Millisecond
}

// wait is a blocking Acquire, run by driver.Wait: try; when the key is
// held, join the key's queue on every node and wait for a release to wake
// this waiter, for the holders' expiry, or after a split vote for a
// jittered backoff, and try again. The first waiting Acquire of a Backend
// subscribes to its wake channel first (a try before that, which found
// the key held, is tried again once the channel is subscribed: the try
// queues the waiter); later ones queue with their first try.
func (b *Backend) wait(ctx context.Context, k lockKeys, opts driver.AcquireOptions) (driver.Lease, error) {
	var w *waiter
	if s := b.readySubscriber(); s != nil {
		w = s.add()
	}
	splits := 0
	var gathered time.Time // the end of the gathering of wake-ups (see below)
	l, err := driver.Wait(ctx, driver.Waiter[*lease]{
		Try: func(ctx context.Context, woke bool) (*lease, *driver.Held, error) {
			if w != nil && woke && !w.woke {
				w.woke = true
				gathered = time.Now().Add(gatherWait)
			}
			if w != nil && w.woke {
				// After the first node's release woke w, wait for the
				// releases of a majority of nodes to wake it too, for
				// at most gatherWait: the nodes of one release free the
				// key one after the other, and a try sent at the first
				// wake-up finds the others still held.
				if left := time.Until(gathered); left > 0 && w.sub.woken(w, false) < b.maj {
					return nil, &driver.Held{Wake: w.wake, RetryIn: left}, nil
				}
			}
			l, r, err := b.try(ctx, k, opts, w)
			if w != nil {
				w.queued = true
			}
			switch {
			case err != nil:
				return nil, nil, err
			case l != nil:
				return l, nil, nil
			case w == nil:
				return nil, &driver.Held{}, nil
			}
			w.woke = false
			w.sub.woken(w, true)
			retryIn := r.retryIn
			if r.split {
				splits++
				retryIn, _ = splitBackoff.Backoff(splits)
			}
			return nil, &driver.Held{Wake: w.wake, RetryIn: retryIn}, nil
		},
		Subscribe: func(context.Context) (<-chan struct{}, error) {
			sub, err := b.subscriber()
			if err != nil {
				return nil, err
			}
			w = sub.add()
			return sub.ready, nil
		},
		Leave: func() {
			if w == nil {
				return
			}
			wokeBy := w.sub.remove(w, w.queued)
			if w.queued {
				// Bounded as a failed try's clean-up is: a node that is
				// down must not hold a caller that gave up for a long
				// TTL's per-node timeout (its entry expires with the
				// queue).
				b.leave(ctx, k, w, wokeBy, min(cleanupTimeout, b.cfg.timeoutFor(opts.TTL)))
			}
		},
		Closing: b.closing.Done(),
		Closed:  closed,
	})
	if err != nil {
		return nil, err
	}
	if w != nil {
		w.sub.remove(w, false)
	}
	return l, nil
}

func closed() error { return ErrClosed }

// leave takes a waiter that gave up out of the key's queue on every node,
// once per node, each bounded by timeout, before its Acquire returns: a
// release that woke it would wake nobody else on that node and keep the
// node for it (a reservation) in vain. Where a release woke it already
// (wokeBy has a bit per node whose wake-up reached it since its last try;
// or the node is still kept for it), the node wakes the next waiter
// instead: that release woke nobody else, and the next waiter would
// otherwise sleep until its fallback timer. A node that cannot be
// reached keeps it until the queue lapses or a release drops it; the
// other waiters' fallback timers cover that. Once the Backend is closed,
// only the nodes that woke it are told: the others drop it at their next
// release, since its wake channel is gone.
func (b *Backend) leave(ctx context.Context, k lockKeys, w *waiter, wokeBy uint64, timeout time.Duration) {
	closed := b.isClosed()
	if closed && wokeBy == 0 {
		return
	}
	keys := []string{k.lock, k.waiting, k.queue, k.woken}
	var woke, rest []int
	for i := range b.nodes {
		if wokeBy&(1<<(i%64)) != 0 {
			woke = append(woke, i)
		} else {
			rest = append(rest, i)
		}
	}
	run := func(idx []int, flag string) {
		if len(idx) == 0 {
			return
		}
		each(context.WithoutCancel(ctx), b, idx, timeout, func(ctx context.Context, n Node) (int64, error) {
			return leaveScript.Run(ctx, n, keys, w.member, b.cfg.prefix+wakeName, ceilMillis(maxReserve), flag).Int64()
		})
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		run(woke, "1")
	}()
	if !closed {
		run(rest, "0")
	}
	wg.Wait()
}

// marker is the name of the nodes' seed marker.
func (b *Backend) marker() string { return b.cfg.prefix + markerName }
