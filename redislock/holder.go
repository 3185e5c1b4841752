package redislock

// The holder of one key: read, watched, and its owner changed.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.HolderReader  = (*Backend)(nil)
	_ driver.HolderWatcher = (*Backend)(nil)
	_ driver.OwnerSetter   = (*lease)(nil)
)

// Holder implements driver.HolderReader: peek.lua reads the GET and the
// PTTL of key's lock key in one script call, one round trip, as List reads
// each key it finds; its reply leaves the grant's secret out, so that a
// hook that logs commands and their replies never shows it. Expires is
// this host's clock plus the PTTL read.
func (b *Backend) Holder(ctx context.Context, key string) (driver.Holder, bool, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Holder{}, false, err
	}
	now := time.Now()
	res, err := peekScript().Run(ctx, b.client, []string{b.KeyPath(key)}).Slice()
	if err != nil {
		return driver.Holder{}, false, classify(ctx, "holder", err)
	}
	h, ok, err := parsePeek(res, now)
	if err != nil {
		return driver.Holder{}, false, fmt.Errorf("redislock: holder: %q: %w", key, err)
	}
	if !ok {
		return driver.Holder{}, false, nil
	}
	h.Key = key
	return h, true, nil
}

// watchMarkerTTL is the lifetime of a key's watch marker, which a
// watching Backend sets again every third of it.
const watchMarkerTTL = 30 * time.Second

// remarkPeriod is how often a watch sets its marker again.
func (b *Backend) remarkPeriod() time.Duration {
	if b.hooks.remark > 0 {
		return b.hooks.remark
	}
	return watchMarkerTTL / 3
}

// WatchHolder implements driver.HolderWatcher with the key's release
// channel, on the Backend's pub/sub connection that its waiters share,
// and the key's watch marker: while the marker exists, every grant and
// release of the key publishes on the channel (a change of owner always
// does). WatchHolder returns once Redis confirmed the subscription
// (waiting at most driver.ConfirmWait) and the marker is set, so that no
// later change is missed; the marker is set again every 10s while the
// watch lasts, and the watch ends when that fails (the watcher then reads
// and watches again). A confirmation sent again after go-redis reconnected
// wakes the watcher, since what was published meanwhile is lost. A grant
// that lapses is not announced: the watcher reads again at its Expires.
// The watch ends when ctx ends or the Backend is closed; Close waits for
// it.
func (b *Backend) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	sub, err := b.subscriber()
	if err != nil {
		return nil, err
	}
	k := b.keysFor(key, nil)
	w, err := sub.addWatcher(k.channel)
	if err != nil {
		sub.remove(w)
		return nil, classify(ctx, "watch holder", err)
	}
	confirm := time.NewTimer(driver.ConfirmWait)
	defer confirm.Stop()
	select {
	case <-w.st.ready:
	case <-ctx.Done():
		sub.remove(w)
		return nil, ctx.Err()
	case <-b.closing.Done():
		sub.remove(w)
		return nil, ErrClosed
	case <-confirm.C:
		sub.remove(w)
		return nil, fmt.Errorf("%w: redislock: watch holder: no confirmation of the subscription within %v", driver.ErrUnavailable, driver.ConfirmWait)
	}
	// mark sets the marker, and reports whether it was there.
	mark := func(ctx context.Context) (bool, error) {
		had, err := watchScript().Run(ctx, b.client, []string{k.lock, k.watched}, watchMarkerTTL.Milliseconds()).Int()
		return had == 1, err
	}
	if _, err := mark(ctx); err != nil {
		sub.remove(w)
		return nil, classify(ctx, "watch holder", err)
	}
	// From now on a confirmation (after a reconnection) wakes w.
	w.tried.Store(true)
	// The watch's goroutine is one that Close waits for, so that nothing
	// of the watch uses the client after Close returns.
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		sub.remove(w)
		return nil, ErrClosed
	}
	b.wg.Add(1)
	b.mu.Unlock()
	out := make(chan struct{}, 1)
	go func() {
		defer b.wg.Done()
		defer close(out)
		defer sub.remove(w)
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
				mctx, cancel := context.WithTimeout(ctx, commandTimeout)
				had, err := mark(mctx)
				cancel()
				if err != nil {
					return // the marker may lapse: the watcher watches again
				}
				if !had {
					// The marker was lost: grants since were not
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

// SetOwner implements driver.OwnerSetter: setowner.lua replaces the owner
// in the lock key's value only if the grant still holds the lease's
// secret, keeping its expiry, and tells the key's watchers.
func (l *lease) SetOwner(ctx context.Context, owner string) error {
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return fmt.Errorf("%w: redislock: token %d was released", driver.ErrLockLost, l.token)
	}
	if l.shared {
		return fmt.Errorf("%w: redislock: a shared grant's owner cannot be changed", errors.ErrUnsupported)
	}
	n, err := setOwner().Run(ctx, l.b.client, []string{l.k.lock}, &l.k.held, owner).Int64()
	if err != nil {
		return classify(ctx, "", err)
	}
	switch n {
	case setOwnerSet:
		return nil
	case setOwnerGone:
		return l.gone()
	}
	return fmt.Errorf("redislock: unexpected set-owner reply %d", n)
}
