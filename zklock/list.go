package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// List implements driver.Lister: for each lock path under the Backend's
// prefix whose key starts with prefix, the first node in sequence order if
// it is exclusive, whoever created it (this package, or Curator's
// InterProcessMutex, LeaderLatch or write lock under the same paths);
// otherwise the shared grants, the "__READ__" nodes that no exclusive node
// is ahead of (this package's and Curator's read locks'), with Shared set,
// by token. Owner is the node's data, as text; Since its creation time on
// the server; Token its czxid. Expires is zero: a holder's session
// timeout is not visible to other sessions.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	rctx, cancel := b.request(ctx)
	defer cancel()
	dirs, err := call(rctx, b, func() ([]string, error) {
		c, _, err := b.conn.Children(b.cfg.prefix)
		return c, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, b.sortErr(ctx, rctx, err)
	}
	var holders []driver.Holder
	for _, d := range dirs {
		key, ok := unescapeKey(d)
		if !ok || !strings.HasPrefix(key, prefix) {
			continue
		}
		hs, err := b.grants(rctx, b.cfg.prefix+"/"+d, true)
		if err != nil {
			return nil, b.sortErr(ctx, rctx, fmt.Errorf("list %q: %w", key, err))
		}
		for _, h := range hs {
			h.Key = key
			holders = append(holders, h)
		}
	}
	// Stable: a key's grants stay in the order grants gave them.
	slices.SortStableFunc(holders, func(a, b driver.Holder) int { return strings.Compare(a.Key, b.Key) })
	return holders, nil
}

// holder reads the exclusive holder of the lock path dir: its first node
// in sequence order, unless that is a shared grant's.
func (b *Backend) holder(ctx context.Context, dir string) (driver.Holder, bool, error) {
	hs, err := b.grants(ctx, dir, false)
	if err != nil || len(hs) == 0 || hs[0].Shared {
		return driver.Holder{}, false, err
	}
	return hs[0], true, nil
}

// grants reads the live grants under the lock path dir: the first node in
// sequence order if it is exclusive (the parents of a semaphore at the
// same path are no lock nodes); otherwise, with readers, the shared
// grants' nodes ahead of the first exclusive node, by token, and without,
// none. A node that goes between the listing and its read is skipped.
func (b *Backend) grants(ctx context.Context, dir string, readers bool) ([]driver.Holder, error) {
	children, err := call(ctx, b, func() ([]string, error) {
		c, _, err := b.conn.Children(dir)
		return c, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sortNodes(children)
	var shared []driver.Holder
	for _, c := range children {
		if semaphoreChild(c) {
			continue // a semaphore's, at the key's path: not a lock
		}
		isReader := reader(c)
		if isReader && !readers {
			return nil, nil
		}
		if !isReader && len(shared) > 0 {
			break // a writer waits behind the readers
		}
		type got struct {
			data []byte
			st   *zk.Stat
		}
		g, err := call(ctx, b, func() (got, error) {
			data, st, err := b.conn.Get(dir + "/" + c)
			return got{data, st}, err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, err
		}
		h := driver.Holder{
			Token:  uint64(g.st.Czxid),
			Owner:  string(g.data),
			Since:  time.UnixMilli(g.st.Ctime),
			Shared: isReader,
		}
		if !isReader {
			return []driver.Holder{h}, nil
		}
		shared = append(shared, h)
	}
	sortByToken(shared)
	return shared, nil
}
