package redislock

// The release script's callers: a lease's release (see lease.go), a
// waiter leaving the queue, and the clean-up of an Acquire that gave up
// after a failed request, retried in the background.
//
// Releases remembered. A release whose reply was lost can be retried: the
// release renames the lock key to the lock's last-release key, which then
// holds the released grant's value (its secret) with the TTL it had left,
// so that the retry reports success rather than a loss, while a lease whose
// grant had really gone gets distlock.ErrLockLost. Renaming costs one
// command, where deleting the lock key and writing a tombstone of its own
// cost two and left a key per release on the server (until it expired): a
// lock has one last-release key, overwritten by every release. Only the
// last release is remembered, so a retry reports distlock.ErrLockLost if
// another grant of the key was released since, or the grant would have
// lapsed by then anyway; the release itself had taken effect, and nothing
// is left held. The acquire script reads the record too: a copy of the
// released grant's request that arrives late (go-redis re-sends a request
// whose reply timed out, and the first copy can lag in the network) finds
// its secret there and does nothing, rather than take the key for nobody.
//
// Tombstones. The clean-up of an Acquire whose request failed after
// sending (a lost reply, a timeout, a cancelled context) releases with the
// attempt's secret and leaves a tombstone of that secret whatever it finds,
// for the longest of the TTL, the waiter liveness and tombstoneTTL: the
// acquire script does nothing for a secret with a tombstone, so a request
// that was delayed in the network rather than lost, and arrives after its
// clean-up, neither grants the key to nobody nor queues. A request that
// go-redis itself re-sends after a network error, before the clean-up,
// finds its own grant and confirms it again.

import (
	"context"
	"errors"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redact"
)

const (
	// tombstoneTTL is the least time the tombstone of an Acquire that
	// gave up is kept. It covers a Client's retries (backoff capped at a
	// second).
	tombstoneTTL = 10 * time.Second

	// commandTimeout bounds the clean-up commands sent on a caller's behalf
	// after its own context ended.
	commandTimeout = 2 * time.Second
)

// cleanupRetry paces the background retries of a clean-up: from 10ms,
// doubling, up to a second, with full jitter.
var cleanupRetry = driver.ExponentialBackoff(10*time.Millisecond, time.Second)

// runRelease runs the release script for the grant of args: it
// releases the grant if held, and takes *waiter (if waiter is not nil) out
// of the queue. The waiter's queue member holds the grant's secret: it is
// a redact.Secret, as the secret-bearing scriptArgs are, so that it stays
// out of logs and traces of the command. It returns releaseReleased,
// releaseAlreadyReleased or releaseNotHeld. With abandon > 0 it writes the grant's tombstone in any
// case, to last that long.
func (b *Backend) runRelease(ctx context.Context, args *scriptArgs, waiter *redact.Secret, abandon time.Duration) (int64, error) {
	n, err := runScript(ctx, b.client, releaseScript(), b.releaseArgs(args, waiter, abandon)).Int64()
	return n, classify(ctx, "", err)
}

// releaseArgs are the arguments of release.lua, as runScript takes them.
func (b *Backend) releaseArgs(args *scriptArgs, waiter *redact.Secret, abandon time.Duration) []any {
	var id any = ""
	queued := waiter != nil
	if queued {
		id = waiter
	}
	if abandon > 0 {
		return []any{nil, nil, 9, args.lock, args.last, args.queue, args.alive, args.token, args.watched, args.readers, args.grants,
			args.tomb, args.held, b.releaseFlags[1], id, ceilMillis(abandon)}
	}
	// A release leaves the tombstone out of its keys.
	if !queued {
		// The common case: no waiter, and no argument for it.
		return []any{nil, nil, 8, args.lock, args.last, args.queue, args.alive, args.token, args.watched, args.readers, args.grants,
			args.held, b.releaseFlags[0]}
	}
	return []any{nil, nil, 8, args.lock, args.last, args.queue, args.alive, args.token, args.watched, args.readers, args.grants,
		args.held, b.releaseFlags[0], id}
}

// release runs the release script of the attempt's kind (runRelease, or
// runSharedRelease for a shared attempt).
func (a *attempt) release(ctx context.Context, waiter *redact.Secret, abandon time.Duration) (int64, error) {
	if a.shared {
		return a.b.runSharedRelease(ctx, &a.args, waiter, abandon)
	}
	return a.b.runRelease(ctx, &a.args, waiter, abandon)
}

// leaveQueue takes a waiter out of the queue (waking the next waiter
// if it was first and the lock is free), and releases the grant a release
// may have handed it meanwhile. If that fails, it goes on in the
// background, as abandon does: a handed grant would otherwise keep the
// key for its TTL, held by nobody.
func (a *attempt) leaveQueue(ctx context.Context) {
	leave := func(ctx context.Context) error {
		_, err := a.release(ctx, a.queued(), 0)
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandTimeout)
	err := leave(cctx)
	cancel()
	if err != nil {
		a.retryInBackground(time.Now(), leave)
	}
}

// abandon undoes whatever a failed try may have done at the server (a grant
// whose reply was lost, a place in the queue) and leaves the attempt's
// tombstone, so that a try still on its way does nothing when it arrives.
// It tries at once and, if that fails, goes on in the background
// (driver.Retry, paced by cleanupRetry) while it fails with
// distlock.ErrUnavailable, until the grant would have lapsed anyway or the
// Backend is closed.
func (a *attempt) abandon(ctx context.Context, sent time.Time) {
	b := a.b
	// The tombstone outlives anything the late try could leave: a grant
	// (TTL), a place in the queue (liveness).
	keep := max(a.opts.TTL, b.cfg.liveness, tombstoneTTL)
	cleanUp := func(ctx context.Context) error {
		_, err := a.release(ctx, a.queued(), keep)
		return err
	}
	if h := b.hooks.beforeAbandon; h != nil {
		h()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandTimeout)
	err := cleanUp(cctx)
	cancel()
	if err == nil {
		return
	}
	a.retryInBackground(sent, cleanUp)
}

// retryInBackground retries cleanUp in a goroutine while it fails with
// distlock.ErrUnavailable, paced by cleanupRetry, until what a try sent
// at sent (a grant, a place in the queue) would have lapsed anyway or the
// Backend is closed.
func (a *attempt) retryInBackground(sent time.Time, cleanUp func(context.Context) error) {
	b := a.b
	until := sent.Add(max(a.opts.TTL, b.cfg.liveness))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		ctx, cancel := context.WithDeadline(b.closing, until)
		defer cancel()
		_ = driver.Retry(ctx, cleanupRetry, func(ctx context.Context) error {
			if err := cleanUp(ctx); errors.Is(err, driver.ErrUnavailable) {
				return err
			}
			// Done, or refused in a way that trying again cannot change.
			return nil
		})
	}()
}
