package redlock

// The Backend: its nodes, New and Close, and the parallel requests to the
// nodes that every operation is made of.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Lister  = (*Backend)(nil)
	_ driver.Lease   = (*lease)(nil)
	_ Node           = (*redis.Client)(nil)
)

// Node is what the Backend needs of the client of one Redis server: its
// scripts, SCAN (re-seeding, listings) and pub/sub (waiting). A
// *redis.Client is one; create it with ContextTimeoutEnabled, so that the
// per-node timeout bounds every request (New refuses a *redis.Client
// without it). A grant's secret is given to the scripts as an
// encoding.BinaryMarshaler argument (a redact.Secret), which every
// go-redis client writes as its bytes (and a hook that logs commands shows
// as "[secret]"); a Node of another kind must write it so too.
type Node interface {
	redis.Scripter
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Backend is a driver.Backend over N independent Redis servers (no
// replication between them): a grant needs a majority of them. Create it
// with New; it is safe for concurrent use.
//
// See the package documentation for what it guarantees and what it does
// not.
type Backend struct {
	nodes []Node
	names []string // for errors: the address, or "node i"
	maj   int
	cfg   config
	owned []func() error // Close closes these (OpenURL's clients)

	// mu guards closed and sub; closing is cancelled with closed set, and
	// wg counts the goroutines of clean-ups retried in the background and
	// of the watches (WatchHolder), which Close waits for.
	mu      sync.Mutex
	closed  bool
	closing context.Context
	stop    context.CancelFunc
	sub     *subscriber
	wg      sync.WaitGroup

	// seeding makes one goroutine of this Backend re-seed a node at a time.
	seeding sync.Mutex
	// sawVoting is set once a round of this Backend has met a node that
	// votes: the deployment exists, and nodes all without a marker then
	// lost their data (see seed).
	sawVoting atomic.Bool
	// seedWG counts the re-seedings run in the background (seedLater),
	// which Close lets finish for a moment before it cancels seedCtx.
	seedWG   sync.WaitGroup
	seedCtx  context.Context
	seedStop context.CancelFunc
	// stragglers counts the requests of eachQuorum and eachUntil, which
	// may outlive them, and what eachUntil does with their replies; Add
	// under mu, before closed is set. Close waits for them for
	// closeStraggleWait at most, then cancels lateCtx, which ends them
	// (a request on its way, by its own timeout).
	stragglers sync.WaitGroup
	lateCtx    context.Context
	lateStop   context.CancelFunc

	hooks testHooks
}

// New returns a Backend over nodes, each the client of one independent
// Redis server; a grant needs a majority of them (with 5 nodes, 3). The
// clients stay the caller's: Close does not close them.
//
// New does no I/O. No node, a nil node, the same client twice, a
// *redis.Client without ContextTimeoutEnabled, or an invalid option gets
// an error matching distlock.ErrInvalidOption.
func New(nodes []Node, opts ...Option) (*Backend, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: redlock: "+format, append([]any{driver.ErrInvalidOption}, args...)...)
	}
	if len(nodes) == 0 {
		return nil, bad("no node")
	}
	b := &Backend{nodes: nodes, maj: len(nodes)/2 + 1, cfg: cfg}
	seen := map[Node]bool{}
	for i, n := range nodes {
		if n == nil {
			return nil, bad("node %d is nil", i+1)
		}
		if seen[n] {
			return nil, bad("node %d is given twice", i+1)
		}
		seen[n] = true
		name := fmt.Sprintf("node %d", i+1)
		if c, ok := n.(*redis.Client); ok {
			o := c.Options()
			if !o.ContextTimeoutEnabled {
				return nil, bad("node %d (%s): the client needs ContextTimeoutEnabled, or the per-node timeout cannot bound its requests", i+1, o.Addr)
			}
			name += " (" + o.Addr + ")"
		}
		b.names = append(b.names, name)
	}
	b.closing, b.stop = context.WithCancel(context.Background())
	b.seedCtx, b.seedStop = context.WithCancel(context.Background())
	b.lateCtx, b.lateStop = context.WithCancel(context.Background())
	return b, nil
}

// Nodes returns the Backend's nodes, in the order given to New (for a
// Backend from OpenURL, the URL's order, each a *redis.Client), as
// etcdlock's Client and pglock's Pool return the client they use. The
// Backend keeps using them: do not close them before the Backend.
func (b *Backend) Nodes() []Node { return slices.Clone(b.nodes) }

// Close stops what the Backend started: its pub/sub connections, its
// goroutines (the watches' among them) and any clean-up still being
// retried (a grant whose clean-up is abandoned that way lapses by its
// TTL). What is under way in the background is given up to 2s to finish
// first: a re-seeding of a node, and the stragglers, the requests that a
// call stopped waiting for once the nodes that had answered decided it
// (a refresh's, a release's, an OpenURL's or a List's; see the package
// documentation), with what their replies call for (a release retried).
// Close then cancels the stragglers and returns: a request already on
// its way to a node that does not answer ends by its per-node timeout
// (or when its client is closed), in a goroutine that outlives Close
// until then, and nothing is done with its reply; a grant it leaves
// lapses by its TTL. So a node that does not answer holds Close for 2s
// at most. Waiting Acquire calls return an error matching ErrClosed.
// Leases keep working. Close does not close the clients given to New; a
// Backend from OpenURL closes those it created, last. Close is
// idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.stop()
	sub := b.sub
	b.mu.Unlock()
	var err error
	if sub != nil {
		err = sub.close()
	}
	// The re-seedings and the stragglers have 2s each, side by side.
	seeded := make(chan struct{})
	go func() {
		defer close(seeded)
		b.finishSeeding()
	}()
	b.finishStragglers()
	<-seeded
	b.wg.Wait()
	for _, c := range b.owned {
		err = errors.Join(err, c())
	}
	return err
}

// closeStraggleWait bounds how long Close waits for the stragglers (see
// eachUntil and eachQuorum).
const closeStraggleWait = 2 * time.Second

// finishStragglers waits for the stragglers, for closeStraggleWait at
// most, then cancels those still under way (see Close).
func (b *Backend) finishStragglers() {
	done := make(chan struct{})
	go func() {
		b.stragglers.Wait()
		close(done)
	}()
	t := time.NewTimer(closeStraggleWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	b.lateStop()
}

func (b *Backend) isClosed() bool { return b.closing.Err() != nil }

// reply is one node's answer to a request: a value, or an error.
type reply[T any] struct {
	val T
	err error
}

// each sends f to the nodes idx (all nodes when nil) in parallel, each
// bounded by timeout, and returns their replies by node index once all
// have answered or timed out. Every call has returned when each returns.
func each[T any](ctx context.Context, b *Backend, idx []int, timeout time.Duration, f func(ctx context.Context, n Node) (T, error)) []reply[T] {
	if idx == nil {
		idx = all(len(b.nodes))
	}
	out := make([]reply[T], len(b.nodes))
	if len(idx) == 0 {
		return out
	}
	// The requests leave together: one deadline bounds each of them, and
	// the last one runs on the caller's goroutine.
	nctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	call := func(i int) {
		v, err := f(nctx, b.nodes[i])
		out[i] = reply[T]{v, classify(ctx, err)}
	}
	var wg sync.WaitGroup
	for _, i := range idx[:len(idx)-1] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(i)
		}()
	}
	call(idx[len(idx)-1])
	wg.Wait()
	return out
}

// quorum says when eachQuorum may stop waiting for the nodes that have
// not answered once a majority answered without an error, which took d:
// when decided reports that the replies so far (answered by node index)
// fix the result whatever those nodes say, straggle(d) after that
// majority at most; while it does not, for as long as the timeout.
type quorum[T any] struct {
	straggle func(d time.Duration) time.Duration
	decided  func(out []reply[T], answered []bool) bool
}

// eachQuorum is each for the operations that need the answers of a
// majority of the nodes only (opening, listing): once a majority of all
// the nodes answered without an error, and as long as q.decided says
// that the others cannot change the result, it waits for them
// q.straggle more at most, so that a node that is paused or cut off does
// not hold the operation for the whole timeout when nothing depends on
// it; nor does it wait once ctx ends. A node it stops waiting for gets
// an error matching distlock.ErrUnavailable (or ctx's error); its request
// goes on in the background until it is answered or times out (a
// request cannot be called back once sent), or Close cancels it (see
// finishStragglers). After Close, eachQuorum is each.
func eachQuorum[T any](ctx context.Context, b *Backend, timeout time.Duration, q quorum[T], f func(ctx context.Context, n Node) (T, error)) []reply[T] {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return each(ctx, b, nil, timeout, f)
	}
	b.stragglers.Add(len(b.nodes) + 1)
	b.mu.Unlock()
	type answer struct {
		i int
		r reply[T]
	}
	// Buffered for every answer: a request answered after eachQuorum
	// returned does not block.
	answers := make(chan answer, len(b.nodes))
	nctx, cancel := context.WithTimeout(ctx, timeout)
	stopLate := context.AfterFunc(b.lateCtx, cancel)
	var calls sync.WaitGroup
	calls.Add(len(b.nodes))
	for i := range b.nodes {
		go func() {
			defer b.stragglers.Done()
			defer calls.Done()
			v, err := f(nctx, b.nodes[i])
			answers <- answer{i, reply[T]{v, classify(ctx, err)}}
		}()
	}
	go func() {
		defer b.stragglers.Done()
		calls.Wait()
		stopLate()
		cancel()
	}()
	out := make([]reply[T], len(b.nodes))
	answered := make([]bool, len(b.nodes))
	start := time.Now()
	// cutAt is when to stop waiting once the result is decided: straggle
	// after the majority answered. The timer runs only while decided.
	var cutAt time.Time
	cut := time.NewTimer(time.Hour)
	cut.Stop()
	defer cut.Stop()
	for got, ok := 0, 0; got < len(b.nodes); got++ {
		var a answer
		select {
		case a = <-answers:
		case <-cut.C:
			waited := time.Since(start).Round(time.Millisecond)
			for i := range out {
				if !answered[i] {
					out[i].err = fmt.Errorf("%w: no answer within %v, when a majority had answered", driver.ErrUnavailable, waited)
				}
			}
			return out
		case <-ctx.Done():
			// A request is not interrupted by ctx's end, only by its
			// deadline: do not wait for it.
			for i := range out {
				if !answered[i] {
					out[i].err = classify(ctx, ctx.Err())
				}
			}
			return out
		}
		out[a.i], answered[a.i] = a.r, true
		if a.r.err == nil {
			if ok++; ok == b.maj {
				cutAt = time.Now().Add(q.straggle(time.Since(start)))
			}
		}
		if ok >= b.maj && got+1 < len(b.nodes) && q.decided(out, answered) {
			// Past cutAt already (a late answer decided the result),
			// the timer fires at once.
			cut.Reset(time.Until(cutAt))
		} else {
			cut.Stop()
		}
	}
	return out
}

// eachUntil is each over every node for a round that a majority can
// decide (a refresh, a release): it returns the replies by node index as
// soon as decided says that the replies so far (answered, by node index)
// fix the round's outcome, and otherwise once every node has answered or
// timed out. decided is called with each new
// reply, on the caller's goroutine.
//
// A node that has not answered when it returns (a straggler) has
// answered[i] false and a zero reply. Its request goes on in the
// background (a request cannot be called back once sent), no longer
// bound to ctx, whose end after the decision must not cut the stragglers
// short (a caller that cancels once its call returned), but still to
// the timeout, and to Close (see finishStragglers). Once every node has
// answered, rest (when not nil) gets every reply and which nodes had
// answered when eachUntil returned, on a goroutine that Close waits for
// (2s at most), with a context of the same bounds less the timeout: the
// place for what a straggler's reply still requires (a release
// retried). Once Close cancelled the stragglers, rest is not called.
// While the caller waits, ctx's end cancels every request, as each's
// does.
//
// After Close, over fewer than three nodes, and once ctx ended, eachUntil
// is each, and rest is not called.
func eachUntil[T any](ctx context.Context, b *Backend, timeout time.Duration, decided func(out []reply[T], answered []bool) bool, rest func(ctx context.Context, all []reply[T], answered []bool), f func(ctx context.Context, n Node) (T, error)) (out []reply[T], answered []bool) {
	n := len(b.nodes)
	answered = make([]bool, n)
	b.mu.Lock()
	if b.closed || n < 3 || ctx.Err() != nil {
		// Under three nodes a majority is every node: nothing to decide
		// early, and each spares the goroutine of one request. Once ctx
		// ended, each sends nothing.
		b.mu.Unlock()
		out = each(ctx, b, nil, timeout, f)
		for i := range answered {
			answered[i] = true
		}
		return out, answered
	}
	b.stragglers.Add(n + 1)
	b.mu.Unlock()
	// late bounds the stragglers: ctx's values without its end, and
	// Close's cancel. nctx bounds every request: late and the timeout,
	// and ctx's end until the round is decided (stopCaller).
	late, lateCancel := context.WithCancel(context.WithoutCancel(ctx))
	stopLate := context.AfterFunc(b.lateCtx, lateCancel)
	nctx, cancel := context.WithTimeout(late, timeout)
	stopCaller := context.AfterFunc(ctx, cancel)
	type answer struct {
		i   int
		v   T
		err error
	}
	// Buffered for every answer: a request answered after eachUntil
	// returned does not block.
	answers := make(chan answer, n)
	for i := range b.nodes {
		go func() {
			defer b.stragglers.Done()
			v, err := f(nctx, b.nodes[i])
			answers <- answer{i, v, err}
		}()
	}
	out = make([]reply[T], n)
	got := 0
	for got < n {
		a := <-answers
		got++
		out[a.i], answered[a.i] = reply[T]{a.v, classify(ctx, a.err)}, true
		if got < n && decided(out, answered) {
			break
		}
	}
	if got == n {
		stopCaller()
		cancel()
		stopLate()
		lateCancel()
		b.stragglers.Done()
		return out, answered
	}
	// Decided: the caller's ctx no longer ends the requests (if it ended
	// already, they are cancelled; stopCaller cannot undo that).
	stopCaller()
	// The stragglers: collected on copies, so that the caller owns out
	// and answered.
	all, decidedBy := slices.Clone(out), slices.Clone(answered)
	go func() {
		defer b.stragglers.Done()
		defer func() {
			stopLate()
			lateCancel()
		}()
		for ; got < n; got++ {
			a := <-answers
			all[a.i] = reply[T]{a.v, classify(late, a.err)}
		}
		cancel()
		if rest != nil && late.Err() == nil {
			rest(late, all, decidedBy)
		}
	}()
	return out, answered
}

// all returns 0..n-1.
func all(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// testHooks let this package's tests change what takes long; all zero
// outside tests.
type testHooks struct {
	remark time.Duration // replaces a watch's re-mark period when not zero
	secret func(string)  // when not nil, gets the secret of every try
}
