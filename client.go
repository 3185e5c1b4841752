package distlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// A Client acquires locks from one Backend and keeps them: it renews them,
// cancels their contexts when they can no longer be trusted, and releases
// them. One Client is meant to be shared by a whole process; it is safe for
// concurrent use.
//
// The Client runs one watchdog goroutine while it holds locks that need
// renewal or a deadline, whatever their number. It exits a second after the
// last is released (so that locks taken one after another share it), or
// later if it was asleep until a renewal of that lock due later (at most a
// renewal interval), or at once at Close.
type Client struct {
	b       driver.Backend
	batch   driver.BatchRefresher // nil when the backend cannot batch
	cfg     config
	metrics *metrics

	closing context.Context // cancelled by Close, with ErrClosed: ends waiting acquires
	close   context.CancelCauseFunc

	// mu guards the fields below, the watchdog's and the grants' fields
	// that grant's comment lists.
	mu     sync.Mutex
	closed bool
	grants map[*grant]struct{} // held: what Close releases
	active int                 // acquires in progress and background goroutines
	// waits cancel the contexts of the acquisitions in progress, by an id
	// from lastWait: what Close ends.
	waits    map[uint64]context.CancelCauseFunc
	lastWait uint64
	idle     chan struct{} // closed when active drops to 0 after Close
	wd       watchdog
}

// New returns a Client over b. The options set defaults for every lock the
// Client acquires; an error matching ErrInvalidOption reports a bad one.
func New(b driver.Backend, opts ...Option) (*Client, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidOption)
	}
	cfg, err := defaultConfig().with(opts)
	if err != nil {
		return nil, err
	}
	if cfg.shared || cfg.writer || cfg.permit {
		// Each would make every Acquire of the Client one kind of grant,
		// and refuse the options of the others (a permit, a candidacy).
		return nil, fmt.Errorf("%w: WithShared, WithWriter and WithSemaphore are options of one acquisition, not of a Client", ErrInvalidOption)
	}
	ms, err := newMetrics(cfg.meters, backendName(b), cfg.keyLabel)
	if err != nil {
		return nil, fmt.Errorf("distlock: metrics: %w", err)
	}
	c := &Client{b: b, cfg: cfg, metrics: ms, grants: map[*grant]struct{}{}, waits: map[uint64]context.CancelCauseFunc{}, wd: newWatchdog()}
	c.closing, c.close = context.WithCancelCause(context.Background())
	c.batch, _ = b.(driver.BatchRefresher)
	return c, nil
}

// Acquire waits until key is granted (or, with WithWait(false), tries once)
// and returns the Lock. If ctx ends first the error matches both
// ErrNotAcquired and ctx.Err(). Every error it returns is a *KeyError.
//
// If ctx comes from a Lock of this Client on the same key (its Context, a
// context derived from it, or the Context of a LockSet holding the key),
// Acquire is reentrant: it returns at once a new handle on the same grant
// (same token), and the grant is released when every handle has been
// released. See WithMaxDepth.
//
// The lock's context carries ctx's values but not its cancellation: ctx
// bounds the wait, not the hold. The lock's context ends when the lock is
// lost or released, or when a lock (or lock set) whose context ctx came
// from ends. In that last case the lock is still held, and renewed, until
// its holder releases it: its Err, and its context's cause, is then an
// *EnclosingError (matching ErrEnclosingEnded, not ErrLockLost nor
// ErrReleased) that says which enclosing lock ended and why. Release it as
// any other, or the key stays held.
func (c *Client) Acquire(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	cfg, err := c.lockConfig(opts)
	if err != nil {
		return nil, keyErr("acquire", key, err)
	}
	l, err := c.acquire(ctx, ctx, key, cfg)
	return l, keyErr("acquire", key, err)
}

// TryAcquire is Acquire with WithWait(false): when key is held it returns at
// once with an error matching ErrNotAcquired.
func (c *Client) TryAcquire(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	cfg, err := c.lockConfig(opts)
	if err != nil {
		return nil, keyErr("acquire", key, err)
	}
	cfg.wait = false // as WithWait(false) after opts (see TestCycleAllocs)
	l, err := c.acquire(ctx, ctx, key, cfg)
	return l, keyErr("acquire", key, err)
}

// Do acquires key, runs fn with a context that ends when the lock is lost or
// ctx ends, and releases the lock when fn returns (or panics). The returned
// error joins fn's error with an error matching ErrLockLost if the lock was
// lost before fn returned: in that case fn's work was not fully protected,
// even if fn itself reported success.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...LockOption) (err error) {
	l, err := c.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(l.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer func() {
		stop()
		cancel(nil)
		// A done ctx gets a fresh one, bounded by the TTL.
		if rerr := l.Release(ctx); err == nil {
			err = rerr
		} else if rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(fctx)
}

// Close releases every lock the Client still holds (outermost handles
// included), ends acquisitions in progress with ErrClosed, and waits for the
// Client's goroutines. Later acquisitions fail with ErrClosed. Close returns
// the joined errors of the releases that failed; locks that had been lost
// are not reported.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	if c.idle == nil {
		c.idle = make(chan struct{})
		if c.active == 0 {
			close(c.idle)
		}
	}
	gs := make([]*grant, 0, len(c.grants))
	for g := range c.grants {
		gs = append(gs, g)
	}
	waits := make([]context.CancelCauseFunc, 0, len(c.waits))
	for _, cancel := range c.waits {
		waits = append(waits, cancel)
	}
	c.mu.Unlock()
	c.close(ErrClosed)
	for _, cancel := range waits {
		cancel(ErrClosed)
	}

	var errs []error
	for _, g := range gs {
		if err := c.releaseAll(ctx, g); err != nil && !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, keyErr("release", g.key, err))
		}
	}
	c.mu.Lock()
	c.wd.kickLocked() // an idle watchdog exits now
	c.mu.Unlock()
	select {
	case <-c.idle:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// lockConfig is the Client's configuration with one acquisition's options.
func (c *Client) lockConfig(opts []LockOption) (config, error) {
	return c.cfg.withLock(opts)
}

// enterWait counts an acquisition in progress, whose wait Close ends with
// cancel; it fails once the Client is closed. leaveWait(id) ends it.
func (c *Client) enterWait(cancel context.CancelCauseFunc) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, ErrClosed
	}
	c.active++
	c.lastWait++
	c.waits[c.lastWait] = cancel
	return c.lastWait, nil
}

// enter counts an acquisition in progress whose context ends with
// c.closing: Close has nothing to cancel for it. It fails once the Client is
// closed; leave ends it.
func (c *Client) enter() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.active++
	return nil
}

func (c *Client) leaveWait(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waits, id)
	c.leaveLocked()
}

// leave ends what enter, enterWait or goBackgroundLocked counted.
func (c *Client) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaveLocked()
}

func (c *Client) leaveLocked() {
	c.active--
	if c.active == 0 && c.idle != nil {
		select {
		case <-c.idle:
		default:
			close(c.idle)
		}
	}
}

// goBackgroundLocked runs f in a goroutine that Close waits for.
func (c *Client) goBackgroundLocked(f func()) {
	c.active++
	go func() {
		defer c.leave()
		f()
	}()
}

// acquire takes key; waitCtx bounds the wait and parent gives the new lock
// its values and the scope it is created in. Its errors are not yet
// KeyErrors.
func (c *Client) acquire(waitCtx, parent context.Context, key string, cfg config) (*Lock, error) {
	if !c.metrics.acquire.Enabled(bg) { // no clock reads for what nobody records
		return c.take(waitCtx, parent, key, cfg)
	}
	start := time.Now()
	l, err := c.take(waitCtx, parent, key, cfg)
	c.metrics.acquired(key, acquireOutcomeOf(waitCtx, err), time.Since(start))
	return l, err
}

func (c *Client) take(waitCtx, parent context.Context, key string, cfg config) (*Lock, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if !cfg.permit { // a permit never re-enters
		if n := findHeld(parent, c, key); n != nil {
			if n.g.cfg.shared && !cfg.shared {
				return nil, ErrUpgrade
			}
			return c.reenter(waitCtx, parentScope(parent), n, cfg.maxDepth)
		}
	}
	if waitCtx.Err() != nil {
		return nil, notAcquired(waitCtx, nil)
	}
	// Close ends the wait too. A waitCtx that never ends (Background, or
	// values only) is bounded by c.closing alone: the backend is given its
	// values with c.closing's cancellation. Otherwise Close cancels ctx,
	// found in c.waits. (TestCycleAllocs says what both ways save.)
	var ctx context.Context
	if waitCtx.Done() == nil {
		ctx = &closingCtx{Context: waitCtx, closing: c.closing}
		if err := c.enter(); err != nil {
			return nil, err
		}
		defer c.leave()
	} else {
		cctx, cancel := context.WithCancelCause(waitCtx)
		defer cancel(nil)
		id, err := c.enterWait(cancel)
		if err != nil {
			return nil, err
		}
		defer c.leaveWait(id)
		ctx = cctx
	}
	if cfg.wait {
		c.metrics.waiting(key, 1)
		defer c.metrics.waiting(key, -1)
	}

	for failures := 0; ; {
		g := newGrant(c, key, cfg)
		lease, err := c.acquireLease(ctx, key, cfg, g)
		if err == nil {
			if err = c.start(g, lease, parent); err == nil {
				if c.debug() {
					c.cfg.logger.Debug("distlock: acquired", "key", shortKey(key), "token", g.token)
				}
				g.first.g = g
				return &g.first, nil
			}
		}
		switch {
		case waitCtx.Err() != nil:
			return nil, notAcquired(waitCtx, err)
		case c.closing.Err() != nil:
			return nil, ErrClosed
		case !errors.Is(err, ErrUnavailable):
			return nil, err
		}
		failures++
		d, ok := cfg.retry.Backoff(failures)
		if !ok {
			return nil, err
		}
		if c.debug() {
			c.cfg.logger.Debug("distlock: acquire failed, retrying", "key", shortKey(key), "err", err, "backoff", d)
		}
		if sleep(ctx, d) != nil {
			if waitCtx.Err() != nil {
				return nil, notAcquired(waitCtx, err)
			}
			return nil, ErrClosed
		}
	}
}

// acquireLease asks the backend for key as cfg says: a lock, or a
// semaphore's permit.
func (c *Client) acquireLease(ctx context.Context, key string, cfg config, g *grant) (driver.Lease, error) {
	opts := driver.AcquireOptions{TTL: cfg.ttl, Wait: cfg.wait, Owner: cfg.owner, OnLost: g.onLost,
		Election: cfg.election, Writer: cfg.writer}
	if cfg.shared {
		s, ok := c.b.(driver.SharedLocks)
		if !ok {
			return nil, fmt.Errorf("distlock: %s cannot grant shared locks: %w", c.metrics.backend.Value.AsString(), errors.ErrUnsupported)
		}
		return s.AcquireShared(ctx, key, opts)
	}
	if !cfg.permit {
		return c.b.Acquire(ctx, key, opts)
	}
	s, ok := c.b.(driver.Semaphores)
	if !ok {
		return nil, fmt.Errorf("distlock: %s cannot grant permits: %w", c.metrics.backend.Value.AsString(), errors.ErrUnsupported)
	}
	lease, err := s.AcquirePermit(ctx, key, cfg.semaphore, opts)
	if err != nil || !cfg.semaphore.Slots {
		return lease, err
	}
	if _, ok := lease.(driver.SlotLease); !ok {
		// A permit without its slot would let two holders share a
		// slot's fence: give it back, in the background as start gives
		// back a grant it cannot use, and refuse at once.
		g.lease, g.token = lease, lease.Token()
		c.mu.Lock()
		closed := c.closed
		if !closed {
			c.goBackgroundLocked(func() { c.giveBack(g) })
		}
		c.mu.Unlock()
		if closed {
			c.giveBack(g) // Close may already be waiting: not in the background
		}
		return nil, fmt.Errorf("distlock: %s cannot name a permit's slot: %w", c.metrics.backend.Value.AsString(), errors.ErrUnsupported)
	}
	return lease, nil
}

// closingCtx is the context of an acquisition whose caller's context never
// ends: the caller's values, and the cancellation of the Client's closing.
// closing answers the lookups of its own cancelCtx (the only value it
// holds), so that context.Cause gives ErrClosed and a context a backend
// derives from this one is cancelled by closing directly, with no goroutine
// to watch it.
type closingCtx struct {
	context.Context // the caller's
	closing         context.Context
}

func (c *closingCtx) Done() <-chan struct{} { return c.closing.Done() }
func (c *closingCtx) Err() error            { return c.closing.Err() }

func (c *closingCtx) Value(key any) any {
	if v := c.closing.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// debug reports whether the Client logs at Debug level, so that what is
// not logged is not built (see TestCycleAllocs).
func (c *Client) debug() bool {
	return c.cfg.logger.Enabled(context.Background(), slog.LevelDebug)
}

// notAcquired is the error for an acquisition that ctx ended: it matches
// ErrNotAcquired, ctx.Err() and, when there is one, the cancellation cause
// and the last error from the backend.
func notAcquired(ctx context.Context, last error) error {
	err := fmt.Errorf("%w: %w", ErrNotAcquired, ctx.Err())
	if cause := context.Cause(ctx); cause != ctx.Err() {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	if last != nil && !errors.Is(last, ctx.Err()) {
		err = fmt.Errorf("%w (last error: %w)", err, last)
	}
	return err
}

// start turns a fresh lease into a held lock, or gives it back and returns
// a retryable error when it cannot be used.
func (c *Client) start(g *grant, lease driver.Lease, parent context.Context) error {
	now := time.Now()
	v := lease.Validity()
	g.lease, g.token, g.since = lease, lease.Token(), now
	var deadline time.Time
	if v.TTL > 0 {
		deadline = v.Sent.Add(g.cfg.usable(v.TTL))
	}

	c.mu.Lock()
	early := g.lostEarly
	unusable := !deadline.IsZero() && !deadline.After(now)
	if early != nil || unusable || c.closed {
		g.end.Store(errPtr(ErrReleased))
		closed := c.closed
		if !closed {
			c.goBackgroundLocked(func() { c.giveBack(g) })
		}
		c.mu.Unlock()
		switch {
		case closed:
			c.giveBack(g) // Close may already be waiting: not in the background
			return ErrClosed
		case early != nil:
			return fmt.Errorf("%w: grant lost at once: %w", ErrUnavailable, early)
		default:
			return fmt.Errorf("%w: grant confirmed after its usable validity (%v of %v)", ErrUnavailable, now.Sub(v.Sent), v.TTL)
		}
	}
	node := &g.node
	*node = heldNode{c: c, key: g.key, g: g, next: nearestHeld(parent), scope: &g.ownScope}
	g.scope = &g.ownScope
	g.scope.g = g
	g.scope.hold = holdCtx{parent: parent, nodes: node}
	g.scope.init()
	g.handles, g.started = 1, true
	var maxHoldAt time.Time
	if g.cfg.maxHold > 0 {
		maxHoldAt = now.Add(g.cfg.maxHold)
	}
	g.setLimits(deadline, maxHoldAt)
	g.confirmedLocked(now)
	c.grants[g] = struct{}{} // published: Close may release it from here on
	c.scheduleLocked(g)
	c.mu.Unlock()

	c.metrics.started(g.key)
	// The lock's context also ends with the scope it was acquired in.
	if p := g.scope.parent; p != nil {
		p.adopt(g.scope)
	}
	return nil
}

// reenter returns a new handle on the grant of n, reached from waitCtx,
// whose innermost scope is inner (n's scope or one under it: its why covers
// n's too).
func (c *Client) reenter(waitCtx context.Context, inner *scope, n *heldNode, maxDepth int) (*Lock, error) {
	if waitCtx.Err() != nil {
		return nil, notAcquired(waitCtx, nil)
	}
	g := n.g
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed // Close is releasing every grant
	}
	err := inner.why(nowNanos())
	switch {
	case err == ErrReleased:
		err = fmt.Errorf("%w: the enclosing lock was released", ErrNotHeld)
	case err != nil:
	case g.handles >= maxDepth:
		err = fmt.Errorf("%w: depth %d", ErrTooDeep, maxDepth)
	default:
		g.handles++
		return &Lock{g: g}, nil
	}
	return nil, fmt.Errorf("%w: %w", ErrNotAcquired, err)
}

// lose ends grants that the service (OnLost) or a refresh reported gone.
func (c *Client) lose(gs []*grant, cause error, reported lossReason) {
	c.endGrants(gs, cause, reported)
}

// expire ends grants whose local deadline or MaxHold passed, and gives
// their leases back in the background: the service may still think we hold
// them.
func (c *Client) expire(gs []*grant, cause error) {
	if ended := c.endGrants(gs, cause, lossDeadline); len(ended) > 0 {
		// Only now: the service may grant the key as soon as it is back.
		c.mu.Lock()
		c.goBackgroundLocked(func() { c.giveBackAll(ended) })
		c.mu.Unlock()
	}
}

// endGrants ends those of gs still held with cause (made to match
// ErrLockLost) and returns them. Their contexts are cancelled before
// anything else (logging, releasing), all of them at once. reported is the
// loss's reason unless the cause says the deadline or MaxHold passed.
func (c *Client) endGrants(gs []*grant, cause error, reported lossReason) []*grant {
	if !errors.Is(cause, ErrLockLost) {
		cause = fmt.Errorf("%w: %w", ErrLockLost, cause)
	}
	c.mu.Lock()
	ended := gs[:0:0]
	for _, g := range gs {
		if !g.endedLocked() {
			c.endLocked(g, cause)
			ended = append(ended, g)
		}
	}
	c.mu.Unlock()
	for _, g := range ended {
		g.scope.end(cause)
	}
	reason := lossReasonOf(cause, reported)
	for _, g := range ended {
		c.metrics.ended(g.key, lossOutcome(cause), time.Since(g.since))
		c.metrics.lost(g.key, reason)
		c.cfg.logger.Warn("distlock: lock lost", "key", shortKey(g.key), "token", g.token, "backend", c.metrics.backend.Value.AsString(), "reason", lossReasonNames[reason], "cause", cause)
	}
	return ended
}

// endLocked records g's end, for good, and takes it out of the Client.
func (c *Client) endLocked(g *grant, cause error) {
	g.end.Store(errPtr(cause))
	c.unscheduleLocked(g)
	delete(c.grants, g)
}

// giveBack returns a lease that nobody waits for, bounded by its TTL.
func (c *Client) giveBack(g *grant) {
	ctx, cancel := context.WithTimeout(context.Background(), max(g.cfg.ttl, time.Second))
	defer cancel()
	if err := g.releaseLease(ctx); err != nil && !errors.Is(err, ErrLockLost) {
		c.cfg.logger.Warn("distlock: release failed; the lease will lapse at its TTL", "key", shortKey(g.key), "token", g.token, "err", err)
	}
}

// giveBackAll returns many leases with a bounded number of goroutines.
func (c *Client) giveBackAll(gs []*grant) {
	next := make(chan *grant)
	var wg sync.WaitGroup
	for range min(refreshWorkers, len(gs)) {
		wg.Go(func() {
			for g := range next {
				c.giveBack(g)
			}
		})
	}
	for _, g := range gs {
		next <- g
	}
	close(next)
	wg.Wait()
}

// releaseHandle drops one handle on g and gives the lease back when it was
// the last.
func (c *Client) releaseHandle(ctx context.Context, g *grant) error {
	return c.release(ctx, g, false)
}

// releaseAll drops every handle on g and gives the lease back (Close).
func (c *Client) releaseAll(ctx context.Context, g *grant) error {
	return c.release(ctx, g, true)
}

func (c *Client) release(ctx context.Context, g *grant, all bool) error {
	c.mu.Lock()
	if g.cause() == ErrReleased {
		c.mu.Unlock()
		return fmt.Errorf("%w: already released", ErrNotHeld)
	}
	if all {
		g.handles = 0
	} else if g.handles > 0 {
		g.handles--
	}
	if g.handles > 0 {
		cause := g.cause()
		c.mu.Unlock()
		return cause
	}
	lostCause := g.cause()
	if lostCause == nil {
		c.endLocked(g, ErrReleased)
	}
	c.mu.Unlock()

	// Stop the work under the lock before anyone else can get it. A lost
	// grant's scope has ended, or is ending, with the loss: say that too.
	if lostCause != nil {
		g.scope.end(lostCause)
	} else {
		g.scope.end(ErrReleased)
	}
	if lostCause == nil {
		outcome := released
		if all {
			outcome = closedByClient
		}
		c.metrics.ended(g.key, outcome, time.Since(g.since))
	}
	if ctx.Err() != nil || ctxHolds(ctx, g) {
		// The caller's context is (or is about to be) cancelled; never leave a
		// lock behind for want of a context.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), max(g.cfg.ttl, time.Second))
		defer cancel()
	}
	err := g.releaseLease(ctx)
	if err != nil && !errors.Is(err, ErrLockLost) {
		// Not confirmed (a timeout, a network error): keep trying without
		// the caller, so that the key is not held until the TTL runs out.
		c.mu.Lock()
		c.goBackgroundLocked(func() { c.giveBack(g) })
		c.mu.Unlock()
		err = fmt.Errorf("not confirmed, retrying in the background: %w", err)
	}
	if lostCause != nil {
		return lostCause
	}
	if err == nil && c.debug() {
		c.cfg.logger.Debug("distlock: released", "key", shortKey(g.key), "token", g.token)
	}
	return err
}
