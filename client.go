package distlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
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
	b     Backend
	batch BatchRefresher // nil when the backend cannot batch
	cfg   config

	closing context.Context // cancelled by Close: ends waiting acquires
	close   context.CancelFunc

	mu      sync.Mutex
	closed  bool
	holds   map[*hold]struct{}
	heap    holdHeap
	running bool // the watchdog goroutine is running
	starts  int  // watchdog goroutines started, for tests
	// sleepUntil is when the sleeping watchdog's timer fires (zero while
	// it is not asleep).
	sleepUntil time.Time
	// emptySince is when the heap last became empty: the watchdog exits
	// watchdogLinger after it (or later, when its timer was set for later).
	emptySince time.Time
	kick       chan struct{} // wakes the watchdog when its next event changes
	active     int           // acquires in progress and background goroutines
	idle       chan struct{} // closed when active drops to 0 after Close
}

// New returns a Client over b. The options set defaults for every lock the
// Client acquires; an error matching ErrInvalidOption reports a bad one.
func New(b Backend, opts ...Option) (*Client, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrInvalidOption)
	}
	cfg, err := defaultConfig().with(opts)
	if err != nil {
		return nil, err
	}
	c := &Client{b: b, cfg: cfg, holds: map[*hold]struct{}{}, kick: make(chan struct{}, 1)}
	c.closing, c.close = context.WithCancel(context.Background())
	c.batch, _ = b.(BatchRefresher)
	return c, nil
}

// Backend returns the backend the Client was created with.
func (c *Client) Backend() Backend { return c.b }

// Acquire waits until key is granted (or, with WithWait(false), tries once)
// and returns the Lock. If ctx ends first the error matches both
// ErrNotAcquired and ctx.Err().
//
// If ctx comes from a Lock of this Client on the same key (its Context, or
// a context derived from it), Acquire is reentrant: it returns at once a new
// handle on the same grant (same token), and the grant is released when
// every handle has been released. See WithMaxDepth.
//
// The lock's context carries ctx's values but not its cancellation: ctx
// bounds the wait, not the hold. The lock's context ends when the lock is
// lost or released, or when a lock whose context ctx came from ends. In
// that last case the lock itself is still held (and renewed) until it is
// released or the Client is closed: release it as any other, or the key
// stays held.
func (c *Client) Acquire(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	cfg, err := c.cfg.with(opts)
	if err != nil {
		return nil, keyErr("acquire", key, err)
	}
	return c.acquire(ctx, ctx, key, cfg)
}

// TryAcquire is Acquire with WithWait(false): when key is held it returns at
// once with an error matching ErrNotAcquired.
func (c *Client) TryAcquire(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return c.Acquire(ctx, key, append(slices.Clip(opts), WithWait(false))...)
}

// Do acquires key, runs fn with a context that ends when the lock is lost or
// ctx ends, and releases the lock when fn returns (or panics). The returned
// error joins fn's error with an error matching ErrLockLost if the lock was
// lost before fn returned: in that case fn's work was not fully protected,
// even if fn itself reported success.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	l, err := c.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(l.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer func() {
		stop()
		cancel(nil)
		err = errors.Join(err, l.Release(context.WithoutCancel(ctx)))
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
	holds := make([]*hold, 0, len(c.holds))
	for h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	c.close()

	var errs []error
	for _, h := range holds {
		if err := c.releaseHold(ctx, h, true); err != nil && !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, keyErr("release", h.key, err))
		}
	}
	c.mu.Lock()
	c.kickLocked() // an idle watchdog exits now
	c.mu.Unlock()
	select {
	case <-c.idle:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// enter counts an acquisition in progress; it fails once the Client is
// closed.
func (c *Client) enter() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	c.active++
	return nil
}

// leave ends what enter or goBackground counted.
func (c *Client) leave() {
	c.mu.Lock()
	defer c.mu.Unlock()
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
// its values and its enclosing locks.
func (c *Client) acquire(waitCtx, parent context.Context, key string, cfg config) (*Lock, error) {
	if err := ValidateKey(key); err != nil {
		return nil, keyErr("acquire", key, err)
	}
	if waitCtx.Err() != nil {
		return nil, keyErr("acquire", key, notAcquired(waitCtx, nil))
	}
	if n := findHeld(parent, c, key); n != nil {
		l, err := c.reenter(n.h, cfg.maxDepth)
		return l, keyErr("acquire", key, err)
	}
	if err := c.enter(); err != nil {
		return nil, keyErr("acquire", key, err)
	}
	defer c.leave()

	// Close ends the wait too.
	ctx, cancel := context.WithCancelCause(waitCtx)
	defer cancel(nil)
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	defer stop()

	for failures := 0; ; {
		h := &hold{c: c, key: key, cfg: cfg, idx: -1}
		lease, err := c.b.Acquire(ctx, key, AcquireOptions{TTL: cfg.ttl, Wait: cfg.wait, Owner: c.cfg.owner, OnLost: h.onLost})
		if err == nil {
			if err = c.start(h, lease, parent); err == nil {
				return &Lock{h: h}, nil
			}
		}
		switch {
		case waitCtx.Err() != nil:
			return nil, keyErr("acquire", key, notAcquired(waitCtx, err))
		case c.closing.Err() != nil:
			return nil, keyErr("acquire", key, ErrClosed)
		case !errors.Is(err, ErrUnavailable):
			return nil, keyErr("acquire", key, err)
		}
		failures++
		d, ok := cfg.retry.Backoff(failures)
		if !ok {
			return nil, keyErr("acquire", key, err)
		}
		c.cfg.logger.Debug("distlock: acquire failed, retrying", "key", key, "err", err, "backoff", d)
		if sleep(ctx, d) != nil {
			if waitCtx.Err() != nil {
				return nil, keyErr("acquire", key, notAcquired(waitCtx, err))
			}
			return nil, keyErr("acquire", key, ErrClosed)
		}
	}
}

// notAcquired is the error for an acquisition that ctx ended: it matches
// ErrNotAcquired, ctx.Err() and, when there is one, the cancellation cause.
func notAcquired(ctx context.Context, last error) error {
	why := ctx.Err()
	if cause := context.Cause(ctx); cause != why {
		why = errors.Join(why, cause)
	}
	if last != nil && !errors.Is(last, ctx.Err()) {
		why = errors.Join(why, last)
	}
	return fmt.Errorf("%w: %w", ErrNotAcquired, why)
}

// start turns a fresh lease into a held lock, or gives it back and returns
// a retryable error when it cannot be used.
func (c *Client) start(h *hold, lease Lease, parent context.Context) error {
	now := time.Now()
	v := lease.Validity()
	h.lease, h.token, h.since = lease, lease.Token(), now
	var deadline time.Time
	if v.TTL > 0 {
		deadline = v.Sent.Add(h.cfg.usable(v.TTL))
	}

	c.mu.Lock()
	early := h.lostEarly
	unusable := !deadline.IsZero() && !deadline.After(now)
	if early != nil || unusable || c.closed {
		h.ended = true
		closed := c.closed
		if !closed {
			c.goBackgroundLocked(func() { c.giveBack(h) })
		}
		c.mu.Unlock()
		switch {
		case closed:
			c.giveBack(h) // Close may already be waiting: not in the background
			return ErrClosed
		case early != nil:
			return fmt.Errorf("%w: grant lost at once: %w", ErrUnavailable, early)
		default:
			return fmt.Errorf("%w: grant confirmed after its usable validity (%v of %v)", ErrUnavailable, now.Sub(v.Sent), v.TTL)
		}
	}
	node := &heldNode{c: c, key: h.key, h: h, scope: h, next: nearestHeld(parent)}
	h.ctx, h.cancel = context.WithCancelCause(context.WithValue(context.WithoutCancel(parent), heldKey{}, node))
	h.count, h.started = 1, true
	var maxHoldAt time.Time
	if h.cfg.maxHold > 0 {
		maxHoldAt = now.Add(h.cfg.maxHold)
	}
	h.setLimitsLocked(deadline, maxHoldAt)
	h.nextRenew = h.renewAfterLocked(now)
	if node.next != nil {
		h.parent = node.next.scope
	}
	c.holds[h] = struct{}{} // published: Close may release it from here on
	c.scheduleLocked(h)
	c.mu.Unlock()

	// The lock also ends with the lock it was acquired under.
	if h.parent != nil {
		h.parent.adopt(h)
	}
	return nil
}

func (c *Client) reenter(h *hold, maxDepth int) (*Lock, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	switch {
	case h.ended && h.cause != ErrReleased:
		err = h.cause
	case h.ended || h.count == 0:
		err = fmt.Errorf("%w: the enclosing lock was released", ErrNotHeld)
	case h.ctx.Err() != nil:
		err = context.Cause(h.ctx) // a lock it was acquired under ended
	default:
		err = h.errChain(time.Since(epoch).Nanoseconds()) // what Err would say
	}
	switch {
	case err != nil:
	case h.count >= maxDepth:
		err = fmt.Errorf("%w: depth %d", ErrTooDeep, maxDepth)
	default:
		h.count++
		return &Lock{h: h}, nil
	}
	return nil, fmt.Errorf("%w: %w", ErrNotAcquired, err)
}

// end finishes holds that are lost. With release it also gives their leases
// back in the background: a local deadline or MaxHold passed, so the service
// may still think we hold them. Contexts are cancelled before anything else
// (logging, releasing), all of them at once.
func (c *Client) end(hs []*hold, cause error, release bool) {
	if !errors.Is(cause, ErrLockLost) {
		cause = fmt.Errorf("%w: %w", ErrLockLost, cause)
	}
	c.mu.Lock()
	ended := hs[:0:0]
	for _, h := range hs {
		if !h.ended {
			c.endLocked(h, cause)
			ended = append(ended, h)
		}
	}
	c.mu.Unlock()
	for _, h := range ended {
		h.cancelTree(cause)
	}
	if release && len(ended) > 0 {
		// Only now: the service may grant the key as soon as it is back.
		c.mu.Lock()
		c.goBackgroundLocked(func() { c.giveBackAll(ended) })
		c.mu.Unlock()
	}
	for _, h := range ended {
		c.cfg.logger.Warn("distlock: lock lost", "key", h.key, "token", h.token, "cause", cause)
	}
}

func (c *Client) endLocked(h *hold, cause error) {
	h.ended, h.cause = true, cause
	h.over.Store(&cause)
	c.unscheduleLocked(h)
	delete(c.holds, h)
}

// giveBack returns a lease that nobody waits for, bounded by its TTL.
func (c *Client) giveBack(h *hold) {
	ctx, cancel := context.WithTimeout(context.Background(), max(h.cfg.ttl, time.Second))
	defer cancel()
	if err := h.releaseLease(ctx); err != nil && !errors.Is(err, ErrLockLost) {
		c.cfg.logger.Warn("distlock: release failed; the lease will lapse at its TTL", "key", h.key, "token", h.token, "err", err)
	}
}

// giveBackAll returns many leases with a bounded number of goroutines.
func (c *Client) giveBackAll(hs []*hold) {
	next := make(chan *hold)
	var wg sync.WaitGroup
	for range min(refreshWorkers, len(hs)) {
		wg.Go(func() {
			for h := range next {
				c.giveBack(h)
			}
		})
	}
	for _, h := range hs {
		next <- h
	}
	close(next)
	wg.Wait()
}

// releaseHold drops one handle's hold (or all of them with all) and gives
// the lease back when none is left.
func (c *Client) releaseHold(ctx context.Context, h *hold, all bool) error {
	c.mu.Lock()
	if h.ended && h.cause == ErrReleased {
		c.mu.Unlock()
		return fmt.Errorf("%w: already released", ErrNotHeld)
	}
	if all {
		h.count = 0
	} else if h.count > 0 {
		h.count--
	}
	if h.count > 0 {
		cause := h.cause
		c.mu.Unlock()
		return cause
	}
	lostCause, wasEnded := h.cause, h.ended
	if !wasEnded {
		c.endLocked(h, ErrReleased)
	}
	c.mu.Unlock()

	if !wasEnded {
		// Stop the work under the lock before anyone else can get it.
		h.cancelTree(ErrReleased)
	}
	h.orphan()
	if ctx.Err() != nil || ctxHolds(ctx, h) {
		// The caller's context is (or is about to be) cancelled; never leave a
		// lock behind for want of a context.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), max(h.cfg.ttl, time.Second))
		defer cancel()
	}
	err := h.releaseLease(ctx)
	if err != nil && !errors.Is(err, ErrLockLost) {
		// Not confirmed (a timeout, a network error): keep trying without
		// the caller, so that the key is not held until the TTL runs out.
		c.mu.Lock()
		c.goBackgroundLocked(func() { c.giveBack(h) })
		c.mu.Unlock()
		err = fmt.Errorf("release not confirmed, retrying in the background: %w", err)
	}
	if lostCause != nil {
		return lostCause
	}
	return err
}
