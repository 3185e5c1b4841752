package redlock

// The release script's callers: a lease's release (see lease.go) and the
// clean-up of a try that was not granted, retried in the background on
// the nodes that did not answer it.
//
// Tombstones. A release leaves a tombstone of its secret on each node for
// tombstoneTTL, so that a release retried after a lost reply reports
// success rather than a loss. The clean-up of a try writes the tombstone
// on every node whose reply was a grant or was lost, whatever it finds
// there, for at least the TTL: acquire.lua does nothing for a secret with
// a tombstone, so a request delayed in the network that arrives after its
// clean-up grants nothing to nobody. Nodes whose reply showed that the
// script did nothing (held, not seeded) need no clean-up.

import (
	"context"
	"errors"
	"time"

	"github.com/distlock/distlock/driver"
)

const (
	// tombstoneTTL is how long a release is remembered. It covers a
	// Client's retries of a release (backoff capped at a second).
	tombstoneTTL = 10 * time.Second
	// cleanupTimeout bounds each node's clean-up request sent on a
	// caller's behalf, after its own context may have ended.
	cleanupTimeout = 2 * time.Second
	// maxReserve bounds how long a release keeps a node for the waiter it
	// woke (the per-node timeout of the grant, if shorter): the delay that
	// a woken waiter which does not come (a stopped process) adds, once.
	maxReserve = 250 * time.Millisecond
)

// cleanupRetry paces the background retries of a clean-up: from 10ms,
// doubling, up to a second, with full jitter.
var cleanupRetry = driver.ExponentialBackoff(10*time.Millisecond, time.Second)

// release runs release.lua on node n for the grant with secret; force
// writes the tombstone in any case (a try's clean-up), keep long.
func (b *Backend) release(ctx context.Context, n Node, k lockKeys, secret string, keep time.Duration, force bool) (int64, error) {
	return b.releaseOp(k, k.credential([]byte(secret)), keep, force, "", 0)(ctx, n)
}

// releaseOp is release as one request per node for the grant of c, its
// keys and arguments built once for all the nodes (the secret passed as
// &c.secret: see credential); member is the queue member of the grant's
// waiter, if any, which no node should wake after the release, and each
// node it frees is kept for the waiter it wakes for reserve.
func (b *Backend) releaseOp(k lockKeys, c *credential, keep time.Duration, force bool, member string, reserve time.Duration) func(context.Context, Node) (int64, error) {
	f := "0"
	if force {
		f = "1"
	}
	keys := []string{k.lock, c.tomb, k.waiting, k.queue, k.woken, k.watched}
	args := []any{&c.secret, ceilMillis(keep), b.cfg.prefix + wakeName, f, member, ceilMillis(reserve)}
	return func(ctx context.Context, n Node) (int64, error) {
		return releaseScript.Run(ctx, n, keys, args...).Int64()
	}
}

// abandon undoes what a try that was not granted did or may still do: on
// every node that granted it or whose reply was lost, it releases the
// grant and leaves the tombstone. It sends to those nodes at once, in
// parallel, within ctx (which the caller detaches from its own end: see
// context.WithoutCancel) and a clean-up timeout, and goes on in the
// background for the nodes that failed, until the grant would have lapsed
// anyway or the Backend is closed.
func (b *Backend) abandon(ctx context.Context, k lockKeys, c *credential, sent time.Time, ttl time.Duration, votes []reply[vote]) {
	var idx []int
	for i, v := range votes {
		if v.err != nil || v.val.status == voteGranted {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	keep := max(ttl, tombstoneTTL)
	cleanUp := b.releaseOp(k, c, keep, true, "", 0)
	res := each(ctx, b, idx, min(cleanupTimeout, max(b.cfg.timeoutFor(ttl), 100*time.Millisecond)), cleanUp)
	var failed []int
	for _, i := range idx {
		if res[i].err != nil {
			failed = append(failed, i)
		}
	}
	if len(failed) == 0 {
		return
	}
	b.retryLater(failed, sent.Add(ttl), cleanUp)
}

// retryLater goes on in the background with op on the nodes idx, each
// until op succeeds, fails in a way that trying again cannot change, the
// deadline passes (the grant has lapsed anyway by then) or the Backend is
// closed.
func (b *Backend) retryLater(idx []int, deadline time.Time, op func(context.Context, Node) (int64, error)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for _, i := range idx {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			ctx, cancel := context.WithDeadline(b.closing, deadline)
			defer cancel()
			_ = driver.Retry(ctx, cleanupRetry, func(ctx context.Context) error {
				cctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
				defer cancel()
				_, err := op(cctx, b.nodes[i])
				if err = classify(ctx, err); errors.Is(err, driver.ErrUnavailable) {
					return err
				}
				return nil
			})
		}()
	}
}
