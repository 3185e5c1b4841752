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
	c        *credential
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
	res, answered := eachUntil(ctx, b, b.cfg.timeoutFor(ttl), b.keptDecided, nil, func(ctx context.Context, n Node) (int64, error) {
		return refreshScript.Run(ctx, n, []string{l.k.lock}, &l.c.secret, ceilMillis(ttl)).Int64()
	})
	return l.refreshed(ctx, sent, ttl, res, answered)
}

// refreshed is the outcome of a refresh to ttl sent at sent, from the
// nodes' replies (those answered) to refresh.lua or refresh_many.lua.
func (l *lease) refreshed(ctx context.Context, sent time.Time, ttl time.Duration, res []reply[int64], answered []bool) (driver.Validity, error) {
	b := l.b
	kept, gone, why := tallyKept(res, answered)
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

// keptDecided says whether the refresh replies answered so far fix the
// outcome (see eachUntil): a majority extended the grant, or more than a
// minority no longer holds it.
func (b *Backend) keptDecided(res []reply[int64], answered []bool) bool {
	kept, gone, _ := tallyKept(res, answered)
	return kept >= b.maj || gone > len(b.nodes)-b.maj
}

// tallyKept counts the replies nodeKept and nodeGone, among the answered
// ones (all when answered is nil), and says why the other nodes did not
// answer.
func tallyKept(res []reply[int64], answered []bool) (kept, gone int, why []string) {
	why = make([]string, len(res))
	for i, r := range res {
		switch {
		case answered != nil && !answered[i]:
			why[i] = errStraggler.Error()
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
	op := b.releaseOp(l.k, l.c, tombstoneTTL, false, l.member, min(maxReserve, b.cfg.timeoutFor(l.validity.TTL)))
	// The nodes whose request failed may hold the grant: they are
	// released in the background, until the grant would have lapsed; so
	// are those that the majority decided without, once they answered,
	// if their request failed.
	retry := func(res []reply[int64], among []bool) {
		var failed []int
		for i, r := range res {
			if among[i] && r.err != nil {
				failed = append(failed, i)
			}
		}
		b.retryLater(failed, l.expiry(), op)
	}
	decided := func(res []reply[int64], answered []bool) bool {
		done, notHeld, _ := tallyReleased(res, answered)
		return done >= b.maj || notHeld > len(b.nodes)-b.maj
	}
	res, answered := eachUntil(ctx, b, b.cfg.timeoutFor(l.validity.TTL), decided, func(_ context.Context, all []reply[int64], answered []bool) {
		late := make([]bool, len(answered))
		for i, a := range answered {
			late[i] = !a
		}
		retry(all, late)
	}, op)
	retry(res, answered)
	done, notHeld, why := tallyReleased(res, answered)
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

// tallyReleased counts the release replies, among the answered ones,
// that released the grant (or had: a tombstone) and those of nodes that
// did not hold it, and says why the other nodes did not release it.
func tallyReleased(res []reply[int64], answered []bool) (done, notHeld int, why []string) {
	why = make([]string, len(res))
	for i, r := range res {
		switch {
		case !answered[i]:
			why[i] = errStraggler.Error()
		case r.err != nil:
			why[i] = r.err.Error()
		case r.val == releaseReleased || r.val == releaseAlreadyReleased:
			done++
		default:
			notHeld++
			why[i] = "did not hold the grant"
		}
	}
	return done, notHeld, why
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
