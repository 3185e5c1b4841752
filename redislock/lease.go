package redislock

// The lease of one grant: its token, its validity, and its owner-checked
// refresh and release.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// lease is one grant. It lives in the attempt that was granted (see
// attempt.grant), whose keys and arguments it uses. Its errors do not name
// the key or the operation: the Client's distlock.KeyError does.
type lease struct {
	b        *Backend
	k        *lockKeys
	args     *scriptArgs
	token    uint64
	validity driver.Validity
	shared   bool // a shared grant (AcquireShared)

	mu       sync.Mutex
	released bool // a release was confirmed
}

// Token implements driver.Lease.
func (l *lease) Token() uint64 { return l.token }

// Validity implements driver.Lease.
func (l *lease) Validity() driver.Validity { return l.validity }

// Refresh implements driver.Lease: refresh.lua extends the grant only if
// it still holds the lease's secret, so that a holder whose lease lapsed
// cannot extend the next holder's.
func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	sent := time.Now()
	if l.shared {
		n, err := runScript(ctx, l.b.client, sharedRefresh(), l.sharedRefreshArgs(ttl)).Int64()
		return l.refreshed(ctx, sent, ttl, n, err)
	}
	n, err := refreshScript().Run(ctx, l.b.client, []string{l.k.lock}, &l.k.secret, ceilMillis(ttl)).Int64()
	return l.refreshed(ctx, sent, ttl, n, err)
}

// refreshed turns refresh.lua's reply n (or the error of its call) into a
// Refresh result.
func (l *lease) refreshed(ctx context.Context, sent time.Time, ttl time.Duration, n int64, err error) (driver.Validity, error) {
	if err != nil {
		return driver.Validity{}, classify(ctx, "", err)
	}
	switch n {
	case refreshExtended:
		return driver.Validity{Sent: sent, TTL: ttl}, nil
	case refreshGone:
		return driver.Validity{}, l.gone()
	}
	return driver.Validity{}, fmt.Errorf("redislock: unexpected refresh reply %d", n)
}

// Release implements driver.Lease. A release whose reply was lost can be
// retried: the key's last-release record left by the first attempt makes
// the retry report success, not a loss (see release.go).
func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return fmt.Errorf("%w: redislock: token %d was already released", driver.ErrLockLost, l.token)
	}
	var n int64
	var err error
	if l.shared {
		n, err = l.b.runSharedRelease(ctx, l.args, nil, 0)
	} else {
		n, err = l.b.runRelease(ctx, l.args, nil, 0)
	}
	if err != nil {
		return err
	}
	switch n {
	case releaseReleased, releaseAlreadyReleased:
		l.released = true
		return nil
	case releaseNotHeld:
		return l.gone()
	}
	return fmt.Errorf("redislock: unexpected release reply %d", n)
}

// gone is the error of a lease whose grant the server no longer has.
func (l *lease) gone() error {
	return fmt.Errorf("%w: redislock: the grant of token %d is gone (it expired or was taken over)", driver.ErrLockLost, l.token)
}
