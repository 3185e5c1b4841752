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
// renewal or a deadline, whatever their number, and none otherwise.
type Client struct {
	b     Backend
	batch BatchRefresher // nil when the backend cannot batch
	cfg   config

	mu      sync.Mutex
	closed  bool
	holds   map[*hold]struct{}
	heap    holdHeap
	running bool          // the watchdog goroutine is running
	kick    chan struct{} // wakes the watchdog when an earlier event is added
	wg      sync.WaitGroup
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
// lost or released, or when a lock whose context ctx came from ends.
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
// ctx ends, and releases the lock when fn returns. The returned error joins
// fn's error with an error matching ErrLockLost if the lock was lost before
// fn returned: in that case fn's work was not fully protected, even if fn
// itself reported success.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) error {
	l, err := c.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(l.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	fnErr := fn(fctx)
	stop()
	cancel(nil)
	return errors.Join(fnErr, l.Release(context.WithoutCancel(ctx)))
}

// Close releases every lock the Client still holds (outermost handles
// included) and stops its goroutines. Locks acquired afterwards fail with
// ErrClosed. Close returns the joined errors of the releases that failed;
// locks that had been lost are not reported.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	var holds []*hold
	for h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	var errs []error
	for _, h := range holds {
		if err := c.releaseHold(ctx, h, true); err != nil && !errors.Is(err, ErrLockLost) {
			errs = append(errs, err)
		}
	}
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// acquire takes key; waitCtx bounds the wait and parent gives the new lock
// its values and its enclosing locks.
func (c *Client) acquire(waitCtx, parent context.Context, key string, cfg config) (*Lock, error) {
	if err := ValidateKey(key); err != nil {
		return nil, keyErr("acquire", key, err)
	}
	if n := findHeld(parent, c, key); n != nil {
		l, err := c.reenter(n.h, cfg.maxDepth)
		return l, keyErr("acquire", key, err)
	}
	for failures := 0; ; {
		if err := c.checkOpen(); err != nil {
			return nil, keyErr("acquire", key, err)
		}
		if err := waitCtx.Err(); err != nil {
			return nil, keyErr("acquire", key, fmt.Errorf("%w: %w", ErrNotAcquired, context.Cause(waitCtx)))
		}
		h := &hold{c: c, key: key, cfg: cfg, idx: -1}
		lease, err := c.b.Acquire(waitCtx, key, AcquireOptions{TTL: cfg.ttl, Wait: cfg.wait, Owner: c.cfg.owner, OnLost: h.onLost})
		if err == nil {
			if err = c.start(h, lease, parent); err == nil {
				return &Lock{h: h}, nil
			}
		}
		switch {
		case waitCtx.Err() != nil:
			return nil, keyErr("acquire", key, fmt.Errorf("%w: %w", ErrNotAcquired, errors.Join(context.Cause(waitCtx), err)))
		case !errors.Is(err, ErrUnavailable):
			return nil, keyErr("acquire", key, err)
		}
		failures++
		d, ok := cfg.retry.Backoff(failures)
		if !ok {
			return nil, keyErr("acquire", key, err)
		}
		c.cfg.logger.Debug("distlock: acquire failed, retrying", "key", key, "err", err, "backoff", d)
		if sleep(waitCtx, d) != nil {
			return nil, keyErr("acquire", key, fmt.Errorf("%w: %w", ErrNotAcquired, errors.Join(context.Cause(waitCtx), err)))
		}
	}
}

func (c *Client) checkOpen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return nil
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
		c.mu.Unlock()
		c.releaseInBackground(h)
		switch {
		case c.closed:
			return ErrClosed
		case early != nil:
			return fmt.Errorf("%w: grant lost at once: %w", ErrUnavailable, early)
		default:
			return fmt.Errorf("%w: grant confirmed after its usable validity (%v of %v)", ErrUnavailable, now.Sub(v.Sent), v.TTL)
		}
	}
	node := &heldNode{c: c, key: h.key, h: h, next: nearestHeld(parent)}
	h.ctx, h.cancel = context.WithCancelCause(context.WithValue(context.WithoutCancel(parent), heldKey{}, node))
	h.count, h.started, h.deadline = 1, true, deadline
	if !h.cfg.noRenew {
		h.nextRenew = now.Add(h.cfg.renewInterval())
	}
	if h.cfg.maxHold > 0 {
		h.maxHoldAt = now.Add(h.cfg.maxHold)
	}
	c.holds[h] = struct{}{}
	c.scheduleLocked(h)
	c.mu.Unlock()

	// The lock also ends with the lock it was acquired under.
	if node.next != nil {
		outer := node.next.h
		h.stopOuter = context.AfterFunc(outer.ctx, func() { h.cancel(context.Cause(outer.ctx)) })
	}
	return nil
}

func (c *Client) reenter(h *hold, maxDepth int) (*Lock, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case h.ended && h.cause != ErrReleased:
		return nil, h.cause
	case h.ended || h.count == 0:
		return nil, fmt.Errorf("%w: the enclosing lock was released", ErrNotHeld)
	case h.count >= maxDepth:
		return nil, fmt.Errorf("%w: depth %d", ErrTooDeep, maxDepth)
	}
	h.count++
	return &Lock{h: h}, nil
}

// end finishes a hold that is lost; with release it also gives the lease
// back in the background (a local deadline or MaxHold passed, so the service
// may still think we hold it).
func (c *Client) end(h *hold, cause error, release bool) {
	if !errors.Is(cause, ErrLockLost) {
		cause = fmt.Errorf("%w: %w", ErrLockLost, cause)
	}
	c.mu.Lock()
	if h.ended {
		c.mu.Unlock()
		return
	}
	c.endLocked(h, cause)
	c.mu.Unlock()
	c.cfg.logger.Warn("distlock: lock lost", "key", h.key, "token", h.token, "cause", cause)
	h.cancel(cause)
	if release {
		c.releaseInBackground(h)
	}
}

func (c *Client) endLocked(h *hold, cause error) {
	h.ended, h.cause = true, cause
	c.unscheduleLocked(h)
	delete(c.holds, h)
}

// releaseInBackground gives a lease back without anyone waiting for the
// answer, bounded by the lock's TTL.
func (c *Client) releaseInBackground(h *hold) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), max(h.cfg.ttl, time.Second))
		defer cancel()
		_ = h.releaseLease(ctx)
	}()
}

// releaseHold drops one handle's hold (or all of them with all) and gives
// the lease back when none is left.
func (c *Client) releaseHold(ctx context.Context, h *hold, all bool) error {
	c.mu.Lock()
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
	lostCause := h.cause
	wasEnded := h.ended
	if wasEnded && lostCause == ErrReleased && !all {
		c.mu.Unlock()
		return fmt.Errorf("%w: already released", ErrNotHeld)
	}
	if !wasEnded {
		c.endLocked(h, ErrReleased)
	}
	c.mu.Unlock()

	if !wasEnded {
		// Stop the work under the lock before anyone else can get it.
		h.cancel(ErrReleased)
	}
	if h.stopOuter != nil {
		h.stopOuter()
	}
	if ctx.Err() != nil || ctxHolds(ctx, h) {
		// The caller's context is (or is about to be) cancelled; never leave a
		// lock behind for want of a context.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), max(h.cfg.ttl, time.Second))
		defer cancel()
	}
	err := h.releaseLease(ctx)
	if lostCause != nil && lostCause != ErrReleased {
		return lostCause
	}
	return err
}
