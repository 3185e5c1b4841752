package zklock

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// lease is one grant: our lock node, first of the lock's nodes, ephemeral
// in sess. Its methods are safe for concurrent use.
type lease struct {
	b        *Backend
	sess     *session
	key      string // as given to Acquire
	path     string // of our node
	token    uint64 // the node's czxid
	validity driver.Validity
	onLost   func(error)
	done     chan struct{} // closed when the lease ends
	// sweep, if not empty, is the UUID of our protected name when a
	// create's reply was lost during the acquire: a node of that create,
	// applied after the grant, would stay behind ours, holding the lock
	// for nobody after the release, so the release deletes it too.
	sweep string

	mu    sync.Mutex
	state leaseState
}

type leaseState int

const (
	held           leaseState = iota
	releasing                 // a release is under way
	releaseUnknown            // a release was sent but its answer never came
	ended                     // released or lost
)

var _ driver.Lease = (*lease)(nil)

// Token is the czxid of the lock node: the zxid of the transaction that
// created it.
func (l *lease) Token() uint64 { return l.token }

// Key returns the key the lease was acquired for.
func (l *lease) Key() string { return l.key }

// Path returns the ZooKeeper path of the lease's lock node.
func (l *lease) Path() string { return l.path }

// Validity is the confirmation the grant was reported with: the session's
// validity, from the send time of the request that confirmed the session
// through the leader (see grant).
func (l *lease) Validity() driver.Validity { return l.validity }

// Refresh confirms the session through the leader and reads the lock
// node's stat, two requests sent back to back (see syncThen) whatever ttl
// is: the session's validity applies, from the send time of the
// confirmation, once the replies show the node still there, created for
// this grant and owned by the live session. The session itself is kept alive by the zk client's pings.
func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	if l.state0() != held {
		return driver.Validity{}, l.gone()
	}
	b := l.b
	rctx, cancel := b.request(ctx)
	defer cancel()
	// A node gone is gone for good, whichever request failed: a server
	// behind what our client saw does not take its session.
	st, sent, serr, err := syncThen(rctx, b, l.path, func() (*zk.Stat, error) { return b.stat(l.path) })
	switch {
	case errors.Is(err, zk.ErrNoNode):
		cause := fmt.Errorf("zklock: the node of %q with token %d was deleted", l.key, l.token)
		if serr := b.sessionErr(l.sess); serr != nil {
			cause = serr
		}
		l.lose(cause)
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrLockLost, cause)
	case err != nil:
		return driver.Validity{}, b.sortErr(ctx, rctx, err)
	case serr != nil:
		return driver.Validity{}, b.sortErr(ctx, rctx, serr)
	case st.EphemeralOwner != l.sess.id || uint64(st.Czxid) != l.token:
		cause := fmt.Errorf("zklock: the node of %q with token %d belongs to another grant", l.key, l.token)
		l.lose(cause)
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrLockLost, cause)
	}
	if serr := b.sessionErr(l.sess); serr != nil {
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrLockLost, serr)
	}
	if l.state0() == ended {
		return driver.Validity{}, l.gone()
	}
	return driver.Validity{Sent: sent, TTL: l.sess.validity()}, nil
}

// Release deletes the lock node. If it was gone (the session expired, or
// the node was deleted by someone else) it returns an error matching
// distlock.ErrLockLost. If ZooKeeper does not answer, it returns an error
// matching distlock.ErrUnavailable and the Backend goes on deleting the
// node in the background; a later Release then tries again, and succeeds
// if the node is gone while the session lives.
func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	prev := l.state
	if prev == ended || prev == releasing {
		l.mu.Unlock()
		return l.gone()
	}
	l.state = releasing
	l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		l.setState(prev)
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	b := l.b
	rctx, cancel := b.request(ctx)
	defer cancel()
	_, err := call(rctx, b, func() (struct{}, error) { return struct{}{}, b.conn.Delete(l.path, -1) }, nil)
	switch {
	case err == nil:
		l.end()
		l.dropLate()
		return nil
	case errors.Is(err, zk.ErrNoNode):
		l.end()
		if prev == releaseUnknown && b.sessionErr(l.sess) == nil {
			l.dropLate()
			return nil // the earlier attempt, or its clean-up, deleted it
		}
		return fmt.Errorf("%w: zklock: the node of %q with token %d was gone (its session expired or it was deleted)", driver.ErrLockLost, l.key, l.token)
	}
	l.setState(releaseUnknown)
	b.life.Go(func() { b.dropNode(l.path, l.sess) })
	return b.sortErr(ctx, rctx, err)
}

// dropLate deletes the nodes with our protected name left by a create
// whose reply was lost (see sweep), now or in the background.
func (l *lease) dropLate() {
	if l.sweep != "" {
		l.b.dropProtected(path.Dir(l.path), l.sweep)
	}
}

func (l *lease) state0() leaseState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

func (l *lease) setState(s leaseState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != ended {
		l.state = s
	}
}

func (l *lease) gone() error {
	return fmt.Errorf("%w: zklock: %q with token %d was already released or lost", driver.ErrLockLost, l.key, l.token)
}

// end marks the lease released.
func (l *lease) end() {
	l.mu.Lock()
	if l.state == ended {
		l.mu.Unlock()
		return
	}
	l.state = ended
	close(l.done)
	l.mu.Unlock()
	l.b.unregister(l)
}

// lose ends a held lease because the service no longer holds it, and tells
// the holder, once. A lease being released is left to its release.
func (l *lease) lose(cause error) {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return
	}
	l.state = ended
	close(l.done)
	l.mu.Unlock()
	l.b.unregister(l)
	if l.onLost != nil {
		l.onLost(fmt.Errorf("%w: %w", driver.ErrLockLost, cause))
	}
}
