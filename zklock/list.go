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
// prefix whose key starts with prefix, the first node in Curator's order,
// whoever created it (this package, or Curator's InterProcessMutex under the
// same paths). Owner is the node's data, as text; Since its creation time
// on the server; Token its czxid. Expires is zero: a holder's session
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
		h, ok, err := b.holder(rctx, b.cfg.prefix+"/"+d)
		if err != nil {
			return nil, b.sortErr(ctx, rctx, fmt.Errorf("list %q: %w", key, err))
		}
		if ok {
			h.Key = key
			holders = append(holders, h)
		}
	}
	slices.SortFunc(holders, func(a, b driver.Holder) int { return strings.Compare(a.Key, b.Key) })
	return holders, nil
}

// holder reads the first lock node under dir (the parents of a semaphore
// at the same path are not lock nodes). A node that goes between the
// listing and the read is skipped for the next.
func (b *Backend) holder(ctx context.Context, dir string) (driver.Holder, bool, error) {
	children, err := call(ctx, b, func() ([]string, error) {
		c, _, err := b.conn.Children(dir)
		return c, err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return driver.Holder{}, false, nil
	}
	if err != nil {
		return driver.Holder{}, false, err
	}
	sortNodes(children)
	for _, c := range children {
		if semaphoreChild(c) {
			continue // a semaphore's, at the key's path: not a lock
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
			return driver.Holder{}, false, err
		}
		return driver.Holder{
			Token: uint64(g.st.Czxid),
			Owner: string(g.data),
			Since: time.UnixMilli(g.st.Ctime),
		}, true, nil
	}
	return driver.Holder{}, false, nil
}
