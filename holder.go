package distlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
)

// Holder describes the current grant of one key: its token, the owner
// stored with it (WithOwner, WithLockOwner, Lock.SetOwner) and, where the
// backend knows them, when it was granted and when the service will
// expire it unless it is renewed.
type Holder = driver.Holder

// Permits returns the live permits of the semaphore kept at key, sorted
// by token, its stored limit (0 when nothing holds or awaits a permit,
// driver.UnknownLimit where the backend's layout stores none) and how
// many wait, from a backend that grants permits (driver.Semaphores); any
// other gives an error matching errors.ErrUnsupported. Every error is a
// *KeyError.
func (c *Client) Permits(ctx context.Context, key string) (PermitState, error) {
	if err := ValidateKey(key); err != nil {
		return PermitState{}, keyErr("permits", key, err)
	}
	s, ok := c.b.(driver.Semaphores)
	if !ok {
		err := fmt.Errorf("distlock: %s cannot grant permits: %w", c.metrics.backend.Value.AsString(), errors.ErrUnsupported)
		return PermitState{}, keyErr("permits", key, err)
	}
	st, err := s.Permits(ctx, key)
	return st, keyErr("permits", key, err)
}

// Readers returns the live shared locks of exactly key (WithShared),
// sorted by token, from a backend that grants them (driver.SharedLocks);
// any other gives an error matching errors.ErrUnsupported. An exclusive
// holder of the key is not among them: Holder reports it. Every error is
// a *KeyError.
func (c *Client) Readers(ctx context.Context, key string) ([]Holder, error) {
	if err := ValidateKey(key); err != nil {
		return nil, keyErr("readers", key, err)
	}
	s, ok := c.b.(driver.SharedLocks)
	if !ok {
		err := fmt.Errorf("distlock: %s cannot grant shared locks: %w", c.metrics.backend.Value.AsString(), errors.ErrUnsupported)
		return nil, keyErr("readers", key, err)
	}
	hs, err := s.Readers(ctx, key)
	return hs, keyErr("readers", key, err)
}

// List returns the holders of the keys that start with prefix, sorted by
// key, from a backend that can list them (driver.Lister); any other gives
// an error matching errors.ErrUnsupported. A key's shared grants (Shared
// set) follow its exclusive holder, by token, and the permits of a
// semaphore are listed as the backend lists them. The prefix is "" (every
// key) or valid as a key is (ValidateKey). A backend that could read only
// some keys returns what it read with an error about the rest. Every error
// is a *KeyError naming the prefix.
func (c *Client) List(ctx context.Context, prefix string) ([]Holder, error) {
	if prefix != "" {
		if err := ValidateKey(prefix); err != nil {
			return nil, keyErr("list", prefix, err)
		}
	}
	l, ok := c.b.(driver.Lister)
	if !ok {
		err := fmt.Errorf("distlock: %s cannot list holders: %w", c.metrics.backend.Value.AsString(), errors.ErrUnsupported)
		return nil, keyErr("list", prefix, err)
	}
	hs, err := l.List(ctx, prefix)
	return hs, keyErr("list", prefix, err)
}

// PermitState is the state of a semaphore: its stored limit, its live
// permits and how many wait for one (see Client.Permits).
type PermitState = driver.PermitState

// WatchPoll is how often Watch reads the holder of a key when the backend
// cannot announce changes (it implements no driver.HolderWatcher, or its
// watch cannot be set). With an announcing backend Watch reads only when
// woken, and at the holder's Expires, which a service may pass silently.
const WatchPoll = time.Second

// Holder returns the current grant of exactly key (not of keys it is a
// prefix of), and held false when the key is free. It asks the backend
// for the one key (driver.HolderReader), or else lists the key's prefix
// and keeps the key itself (driver.Lister); a backend that can do neither
// gives an error matching errors.ErrUnsupported. Every error is a
// *KeyError.
func (c *Client) Holder(ctx context.Context, key string) (h Holder, held bool, err error) {
	if err := ValidateKey(key); err != nil {
		return Holder{}, false, keyErr("holder", key, err)
	}
	h, held, err = c.readHolder(ctx, key)
	return h, held, keyErr("holder", key, err)
}

// readHolder is Holder of a valid key, with errors not yet KeyErrors.
func (c *Client) readHolder(ctx context.Context, key string) (Holder, bool, error) {
	if r, ok := c.b.(driver.HolderReader); ok {
		h, held, err := r.Holder(ctx, key)
		if !errors.Is(err, errors.ErrUnsupported) {
			return h, held, err
		}
	}
	l, ok := c.b.(driver.Lister)
	if !ok {
		return Holder{}, false, fmt.Errorf("distlock: %s cannot read holders: %w", c.metrics.backend.Value.AsString(), errors.ErrUnsupported)
	}
	hs, err := l.List(ctx, key)
	for _, h := range hs {
		if h.Key == key && !h.Shared {
			return h, true, nil // (err, if any, is about other keys)
		}
	}
	return Holder{}, false, err
}

// Watch sends the holder of key on the returned channel: first as it is,
// then after each change (a new grant, a release, an expiry, a new owner),
// with Token 0 when the key is free. It reads the holder when the backend
// announces a change (driver.HolderWatcher), at the holder's Expires (a
// lease may lapse silently), and every WatchPoll when the backend cannot
// announce changes; it sends only what differs from what it sent last
// (the token or the owner). A slow receiver gets the latest state, not
// every one in between, and a grant that begins and ends between two reads
// is not seen: Watch reports states, not every event. Tokens sent never
// decrease, because grants' tokens do not.
//
// A failed read is tried again, backing off up to WatchPoll. The channel is
// closed when ctx ends or the Client is closed. An invalid key, a closed
// Client, or a backend that can neither read a key's holder nor list
// holders (errors.ErrUnsupported) is an error (a *KeyError) and no
// channel.
func (c *Client) Watch(ctx context.Context, key string) (<-chan Holder, error) {
	if err := ValidateKey(key); err != nil {
		return nil, keyErr("watch", key, err)
	}
	_, reads := c.b.(driver.HolderReader)
	_, lists := c.b.(driver.Lister)
	if !reads && !lists {
		return nil, keyErr("watch", key, fmt.Errorf("distlock: %s cannot read holders: %w", c.metrics.backend.Value.AsString(), errors.ErrUnsupported))
	}
	out := make(chan Holder)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, keyErr("watch", key, ErrClosed)
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.closing, cancel)
	c.goBackgroundLocked(func() {
		defer cancel()
		defer stop()
		defer close(out)
		c.watchHolder(wctx, key, out)
	})
	return out, nil
}

// watchHolder is Watch's loop; it returns when ctx ends.
func (c *Client) watchHolder(ctx context.Context, key string, out chan<- Holder) {
	w, _ := c.b.(driver.HolderWatcher)
	backoff := driver.ExponentialBackoff(10*time.Millisecond, WatchPoll)
	var (
		wake     <-chan struct{} // the backend's watch, nil when none is set
		unwatch  = func() {}     // drops it
		sent     Holder          // last sent
		hasSent  bool
		pending  Holder        // read and not yet sent
		send     chan<- Holder // out while pending is to be sent
		failures int
	)
	defer func() { unwatch() }()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		// The watch is set before the read, so that a change after the
		// read wakes us.
		if wake == nil && w != nil {
			ch, cancel, err := setWatch(ctx, w, key)
			switch {
			case err == nil:
				wake, unwatch = ch, cancel
			case errors.Is(err, errors.ErrUnsupported):
				w = nil // poll from now on
			}
		}
		h, held, err := c.readHolder(ctx, key)
		var next time.Duration
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			next, _ = backoff.Backoff(failures)
			if c.debug() {
				c.cfg.logger.Debug("distlock: watch read failed", "key", shortKey(key), "err", err, "retry", next)
			}
		} else {
			failures = 0
			if !held {
				h = Holder{Key: key}
			}
			if !hasSent || sent.Token != h.Token || sent.Owner != h.Owner {
				pending, send = h, out
			} else {
				send = nil // back to what the receiver has
			}
			next = WatchPoll
			if wake != nil {
				next = -1 // woken by the backend
			}
			if held && !h.Expires.IsZero() {
				// A lease may lapse silently: look just after it would.
				if d := time.Until(h.Expires) + time.Millisecond; next < 0 || d < next {
					next = max(d, time.Millisecond)
				}
			}
		}
		timer.Stop()
		var tick <-chan time.Time
		if next >= 0 {
			timer.Reset(next)
			tick = timer.C
		}
		for again := false; !again; {
			select {
			case <-ctx.Done():
				return
			case send <- pending:
				sent, hasSent, send = pending, true, nil
			case _, ok := <-wake:
				if !ok { // the watch ended: set it again
					unwatch()
					wake, unwatch = nil, func() {}
				}
				again = true
			case <-tick:
				again = true
			}
		}
	}
}

// setWatch sets a watch of key, which its cancel function drops.
func setWatch(ctx context.Context, w driver.HolderWatcher, key string) (<-chan struct{}, context.CancelFunc, error) {
	wctx, cancel := context.WithCancel(ctx)
	ch, err := w.WatchHolder(wctx, key)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return ch, cancel, nil
}

// SetOwner replaces the owner stored with the lock's grant (see
// WithLockOwner): what Client.Holder and Client.Watch report from then on.
// It is owner-checked by the service: a lock that was lost returns an
// error matching ErrLockLost (and the lock ends), a released one
// ErrNotHeld. A backend that cannot change a held grant's owner returns an
// error matching errors.ErrUnsupported. The owner must be valid UTF-8 of at
// most MaxOwnerLen bytes. Every error is a *KeyError.
func (l *Lock) SetOwner(ctx context.Context, owner string) error {
	g := l.g
	if err := driver.CheckOwner(owner); err != nil {
		return keyErr("set owner", g.key, err)
	}
	if l.released.Load() {
		return keyErr("set owner", g.key, fmt.Errorf("%w: released", ErrNotHeld))
	}
	switch err := g.cause(); err {
	case nil:
	case ErrReleased:
		return keyErr("set owner", g.key, fmt.Errorf("%w: released", ErrNotHeld))
	default:
		return keyErr("set owner", g.key, err)
	}
	s, ok := g.lease.(driver.OwnerSetter)
	if !ok {
		return keyErr("set owner", g.key, fmt.Errorf("distlock: %s cannot change a held grant's owner: %w", g.c.metrics.backend.Value.AsString(), errors.ErrUnsupported))
	}
	err := retry(ctx, g.cfg.retry, func() error { return s.SetOwner(ctx, owner) })
	if errors.Is(err, ErrLockLost) {
		g.c.lose([]*grant{g}, err, lossServiceReported)
	}
	return keyErr("set owner", g.key, err)
}
