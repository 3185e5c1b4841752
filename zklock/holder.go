package zklock

// The holder of one key: read, watched, and its owner changed.

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.HolderReader  = (*Backend)(nil)
	_ driver.HolderWatcher = (*Backend)(nil)
	_ driver.OwnerSetter   = (*lease)(nil)
)

// Holder implements driver.HolderReader as List reads each lock path: the
// first node under key's lock path in sequence order, unless it is a
// shared grant's, its data as Owner, its czxid as Token. It reads that
// path only: "svc/leader" is never "svc/leader2".
func (b *Backend) Holder(ctx context.Context, key string) (driver.Holder, bool, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Holder{}, false, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return driver.Holder{}, false, err
	}
	rctx, cancel := b.request(ctx)
	defer cancel()
	h, ok, err := b.holder(rctx, lockPath(b.cfg.prefix, key))
	if err != nil {
		return driver.Holder{}, false, b.sortErr(ctx, rctx, err)
	}
	h.Key = key
	return h, ok, nil
}

// WatchHolder implements driver.HolderWatcher with ZooKeeper watches: one
// on the children of key's lock path (a node created or deleted: a grant,
// a release, a holder whose session expired, a waiter coming or going),
// or on the creation of the path while it does not exist, and one on the
// data of its first node (SetOwner), unless that is a shared grant's
// (the children watch sees the readers go). Each event sets again the
// watch it fired, and the first node's if it changed, before it wakes the
// watcher, so that no later change is missed; a waiter coming or going
// wakes the watcher too. The zk client sets them again after a reconnection, and
// the ensemble then reports what changed meanwhile; a session that expires
// ends them, and wakes the watcher. The watch ends when ctx ends, when
// setting the watches fails, or when the Backend is closed.
func (b *Backend) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	wake := make(chan struct{}, 1)
	hw := &holderWatch{b: b, dir: lockPath(b.cfg.prefix, key), onDir: &watcher{wake: wake}, onFirst: &watcher{wake: wake}}
	unwatch := func() { b.watch(hw.onDir, ""); b.watch(hw.onFirst, "") }
	if err := hw.arm(ctx); err != nil {
		unwatch()
		return nil, err
	}
	out := make(chan struct{}, 1)
	started := b.life.Go(func() {
		defer close(out)
		defer unwatch()
		for {
			select {
			case <-ctx.Done():
				return
			case <-b.ctx.Done():
				return
			case <-wake:
				if hw.arm(ctx) != nil {
					return // the watcher reads and watches again
				}
				select {
				case out <- struct{}{}:
				default: // one is pending already
				}
			}
		}
	})
	if !started {
		unwatch()
		return nil, ErrClosed
	}
	return out, nil
}

// The events that end a watch of each kind that the zk client sets: a
// children watch (ChildrenW), a watch for a node's creation (ExistsW on a
// node that does not exist), a data watch (GetW). The zk client ends
// every watch of the session with zk.EventNotWatching when the session
// ends.
var (
	endsChildren = eventSet(zk.EventNodeChildrenChanged, zk.EventNodeDeleted, zk.EventNotWatching)
	endsCreation = eventSet(zk.EventNodeCreated, zk.EventNodeDataChanged, zk.EventNodeDeleted, zk.EventNotWatching)
	endsData     = eventSet(zk.EventNodeDataChanged, zk.EventNodeDeleted, zk.EventNotWatching)
)

// holderWatch is the state of one WatchHolder: which of its watches are
// set in the zk client and not yet fired. Its fields are used by one
// goroutine at a time (WatchHolder's caller, then the goroutine it starts).
//
// A watch is set again only once it fired: the zk client adds a watch to
// its list for the path at every request that sets one, and only the
// watch's event empties the list, so a watch set again before it fired
// would stay in the client until it does, one more at each event of the
// other watch.
type holderWatch struct {
	b              *Backend
	dir            string   // the lock path
	onDir, onFirst *watcher // wake-ups of the watches on dir and on its first node
	dirSet         events   // the events that end the watch set on dir; 0 for none
	firstSet       string   // the node whose data watch is set, "" for none
}

// arm sets the watches that are not set: on the lock path's children (or
// its creation), and on the data of its first node. Each watcher is
// registered before the request that sets its watch, whose event comes
// after the reply.
func (hw *holderWatch) arm(ctx context.Context) error {
	b := hw.b
	if hw.dirSet&b.took(hw.onDir) != 0 {
		hw.dirSet = 0
	}
	if endsData&b.took(hw.onFirst) != 0 {
		hw.firstSet = ""
	}
	rctx, cancel := b.request(ctx)
	defer cancel()
	for {
		b.watch(hw.onDir, hw.dir)
		var children []string
		var err error
		switch hw.dirSet {
		case 0:
			children, err = call(rctx, b, func() ([]string, error) {
				c, _, _, err := b.conn.ChildrenW(hw.dir)
				return c, err
			}, nil)
			if err == nil {
				hw.dirSet = endsChildren
			}
		case endsCreation:
			// The path did not exist, and has not been created since.
			b.watch(hw.onFirst, "")
			hw.firstSet = ""
			return nil
		default:
			children, err = call(rctx, b, func() ([]string, error) {
				c, _, err := b.conn.Children(hw.dir)
				return c, err
			}, nil)
			if errors.Is(err, zk.ErrNoNode) {
				hw.dirSet = 0 // deleted since: its watch fired
				continue
			}
		}
		if errors.Is(err, zk.ErrNoNode) {
			// ExistsW on a missing node watches for its creation.
			exists, err := call(rctx, b, func() (bool, error) {
				ok, _, _, err := b.conn.ExistsW(hw.dir)
				return ok, err
			}, nil)
			if err != nil {
				return b.sortErr(ctx, rctx, err)
			}
			if exists {
				// Created meanwhile: watch its children. ExistsW set a
				// data watch on it, which its deletion ends.
				continue
			}
			hw.dirSet = endsCreation
			b.watch(hw.onFirst, "")
			hw.firstSet = ""
			return nil
		}
		if err != nil {
			return b.sortErr(ctx, rctx, err)
		}
		sortNodes(children)
		for _, c := range children {
			if semaphoreChild(c) {
				continue // a semaphore's, at the key's path: not a lock
			}
			if reader(c) {
				break // shared grants first: no exclusive holder
			}
			node := hw.dir + "/" + c
			if node == hw.firstSet {
				return nil // its watch is set and has not fired
			}
			b.watch(hw.onFirst, node)
			_, err := call(rctx, b, func() (struct{}, error) {
				_, _, _, err := b.conn.GetW(node)
				return struct{}{}, err
			}, nil)
			if errors.Is(err, zk.ErrNoNode) {
				continue // deleted meanwhile: the children watch fired
			}
			if err != nil {
				hw.firstSet = ""
				return b.sortErr(ctx, rctx, err)
			}
			hw.firstSet = node
			return nil
		}
		b.watch(hw.onFirst, "")
		hw.firstSet = ""
		return nil
	}
}

// SetOwner implements driver.OwnerSetter: it replaces the data of the
// lease's lock node, version-checked. It reads the node's stat, checks
// that the node is the grant's (its czxid is the token, its owner the
// lease's session), and writes the data only if the node's version is
// still the one read. The grant gone (its node deleted, its session
// expired), it fails with an error matching ErrLockLost.
func (l *lease) SetOwner(ctx context.Context, owner string) error {
	l.mu.Lock()
	state := l.state
	l.mu.Unlock()
	if state == ended {
		return l.gone()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	b := l.b
	if err := b.sessionErr(l.sess); err != nil {
		return fmt.Errorf("%w: %w", driver.ErrLockLost, err)
	}
	rctx, cancel := b.request(ctx)
	defer cancel()
	for {
		st, err := call(rctx, b, func() (*zk.Stat, error) {
			_, st, err := b.conn.Exists(l.path)
			return st, err
		}, nil)
		if err != nil {
			return b.sortErr(ctx, rctx, err)
		}
		if st == nil || st.EphemeralOwner != l.sess.id || uint64(st.Czxid) != l.token {
			return fmt.Errorf("%w: zklock: the node of %q with token %d is gone (its session expired or it was deleted)", driver.ErrLockLost, l.key, l.token)
		}
		_, err = call(rctx, b, func() (*zk.Stat, error) {
			return b.conn.Set(l.path, []byte(owner), st.Version)
		}, nil)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrBadVersion):
			continue // changed since the read: read it again
		case errors.Is(err, zk.ErrNoNode):
			return fmt.Errorf("%w: zklock: the node of %q with token %d is gone (its session expired or it was deleted)", driver.ErrLockLost, l.key, l.token)
		}
		return b.sortErr(ctx, rctx, err)
	}
}
