package redlock

// The lease of one grant: its token, its validity, and its refresh and
// release on every node.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// lease is one grant. Its errors do not name the key or the operation: the
// Client's distlock.KeyError does.
type lease struct {
	b        *Backend
	k        lockKeys
	secret   string
	token    uint64
	validity driver.Validity
	// member is the queue member of the waiter granted, or "": a node
	// whose queue kept it (it was held at the try that won) drops it at
	// the release.
	member string

	mu       sync.Mutex
	released bool // a release was confirmed

	vmu  sync.Mutex
	last driver.Validity // the latest confirmed validity (grant or refresh)
}

// Token implements driver.Lease.
func (l *lease) Token() uint64 { return l.token }

// Validity implements driver.Lease.
func (l *lease) Validity() driver.Validity { return l.validity }

// Refresh implements driver.Lease: refresh.lua extends the grant on
// every node that still holds it, in parallel. The refresh counts only
// when a majority extended it with validity left (ttl less the time since
// the first request and the drift); when a majority no longer holds the
// grant, it is lost.
func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	b := l.b
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	if err := b.cfg.checkTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	sent := time.Now()
	res := each(ctx, b, nil, b.cfg.timeoutFor(ttl), func(ctx context.Context, n Node) (int64, error) {
		return refreshScript.Run(ctx, n, []string{l.k.lock}, l.secret, ceilMillis(ttl)).Int64()
	})
	kept, gone, why := tallyKept(res)
	switch {
	case ctx.Err() != nil:
		return driver.Validity{}, fmt.Errorf("redlock: %w", context.Cause(ctx))
	case kept >= b.maj && time.Since(sent)+drift(ttl) < ttl:
		v := driver.Validity{Sent: sent, TTL: ttl}
		l.vmu.Lock()
		l.last = v
		l.vmu.Unlock()
		return v, nil
	case kept >= b.maj:
		return driver.Validity{}, fmt.Errorf("%w: redlock: a majority extended the grant, but too late to count", driver.ErrUnavailable)
	case gone > len(b.nodes)-b.maj:
		return driver.Validity{}, l.gone(gone)
	}
	return driver.Validity{}, b.unavailable("refresh", kept, why)
}

// tallyKept counts the replies nodeKept and nodeGone, and says why the
// other nodes did not answer.
func tallyKept(res []reply[int64]) (kept, gone int, why []string) {
	why = make([]string, len(res))
	for i, r := range res {
		switch {
		case r.err != nil:
			why[i] = r.err.Error()
		case r.val == nodeKept:
			kept++
		default:
			gone++
			why[i] = "does not hold the grant"
		}
	}
	return kept, gone, why
}

// Release implements driver.Lease. It releases the grant on every node
// in parallel; it succeeds when a majority released it (or had, per their
// tombstones: a retried release after a lost reply succeeds), reports
// distlock.ErrLockLost when a majority no longer held it, and otherwise
// distlock.ErrUnavailable, naming the nodes it could not reach (a retry is
// safe). Nodes down meanwhile are left to expire the grant by its TTL.
func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b
	if l.released {
		return fmt.Errorf("%w: redlock: token %d was already released", driver.ErrLockLost, l.token)
	}
	op := b.releaseOp(l.k, l.secret, tombstoneTTL, false, l.member, min(maxReserve, b.cfg.timeoutFor(l.validity.TTL)))
	res := each(ctx, b, nil, b.cfg.timeoutFor(l.validity.TTL), op)
	done, notHeld := 0, 0
	why := make([]string, len(res))
	var failed []int
	for i, r := range res {
		switch {
		case r.err != nil:
			why[i] = r.err.Error()
			failed = append(failed, i)
		case r.val == releaseReleased || r.val == releaseAlreadyReleased:
			done++
		default:
			notHeld++
			why[i] = "did not hold the grant"
		}
	}
	// The nodes that did not answer may hold the grant: they are released
	// in the background, until the grant would have lapsed.
	b.retryLater(failed, l.expiry(), op)
	switch {
	case done >= b.maj:
		l.released = true
		return nil
	case notHeld > len(b.nodes)-b.maj:
		l.released = true
		return l.gone(notHeld)
	case ctx.Err() != nil:
		return fmt.Errorf("redlock: %w", context.Cause(ctx))
	}
	return b.unavailable("release", done, why)
}

// expiry is when every node's grant has lapsed by its TTL: the last
// confirmed validity's end, plus the drift.
func (l *lease) expiry() time.Time {
	l.vmu.Lock()
	defer l.vmu.Unlock()
	v := l.last
	if v.Sent.IsZero() || v.Sent.Before(l.validity.Sent) {
		v = l.validity
	}
	return v.Sent.Add(v.TTL + drift(v.TTL))
}

// gone is the error of a lease that a majority of nodes no longer holds.
func (l *lease) gone(n int) error {
	return fmt.Errorf("%w: redlock: the grant of token %d is gone on %d of %d nodes (it expired or was taken over)",
		driver.ErrLockLost, l.token, n, len(l.b.nodes))
}
