package etcdlock

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.HolderReader  = (*Backend)(nil)
	_ driver.HolderWatcher = (*Backend)(nil)
)

// Holder implements driver.HolderReader: the key created first under
// key's lock name (see KeyPath) holds it, with its create revision as the
// token, unless it is a reader's (AcquireShared): readers hold the key
// then, and Readers reports them. The owner is the key's value when it has one (an election's
// candidate: its value, as `etcdctl elect -l` shows it), and otherwise
// the owner its session recorded (see List). Expires is when the holder's
// etcd lease expires unless kept alive.
func (b *Backend) Holder(ctx context.Context, key string) (driver.Holder, bool, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Holder{}, false, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return driver.Holder{}, false, err
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	resp, err := b.cli.Get(rctx, b.KeyPath(key)+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return driver.Holder{}, false, b.sortErr(ctx, rctx, err)
	}
	if len(resp.Kvs) == 0 || isShared(resp.Kvs[0].Key) {
		return driver.Holder{}, false, nil // free, or held by readers (see Readers)
	}
	kv := resp.Kvs[0]
	h := driver.Holder{Key: key, Token: uint64(kv.CreateRevision), Owner: string(kv.Value)}
	if kv.Lease == 0 {
		return h, true, nil
	}
	if h.Owner == "" {
		or, err := b.cli.Get(rctx, b.ownerKey(clientv3.LeaseID(kv.Lease)))
		if err != nil {
			return driver.Holder{}, false, b.sortErr(ctx, rctx, err)
		}
		if len(or.Kvs) == 1 {
			h.Owner = string(or.Kvs[0].Value)
		}
	}
	hs := []driver.Holder{h}
	b.fillExpiry(rctx, hs, map[int64][]int{kv.Lease: {0}})
	return hs[0], true, nil
}

// WatchHolder implements driver.HolderWatcher with an etcd watch of the
// keys under key's lock name: a key created (a waiter, or a candidate,
// which may become the holder when those before it go), deleted (a
// release, or a lease that etcd expired or revoked, which etcd announces)
// or written (a new value: Proclaim) wakes the watcher. The watch is
// registered in etcd when WatchHolder returns, and requires a leader: a
// member cut off from its cluster ends it, and the caller reads again.
func (b *Backend) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	stop := context.AfterFunc(b.ctx, cancel)
	wch := b.cli.Watch(wctx, b.KeyPath(key)+"/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	fail := func(err error) (<-chan struct{}, error) {
		stop()
		cancel()
		return nil, err
	}
	// Watch has returned once etcd answered the creation; its first
	// response says whether it took.
	select {
	case r, ok := <-wch:
		switch {
		case !ok || r.Canceled || r.Err() != nil:
			if err := b.life.CheckOpen(); err != nil {
				return fail(err)
			}
			if ctx.Err() != nil {
				return fail(driver.Canceled(ctx))
			}
			return fail(fmt.Errorf("%w: etcdlock: watch of %q: %v", driver.ErrUnavailable, key, r.Err()))
		case !r.Created:
			return fail(fmt.Errorf("%w: etcdlock: watch of %q: no answer to its creation", driver.ErrUnavailable, key))
		}
	case <-wctx.Done():
		if err := b.life.CheckOpen(); err != nil {
			return fail(err)
		}
		return fail(driver.Canceled(ctx))
	}
	out := make(chan struct{}, 1)
	started := b.life.Go(func() {
		defer stop()
		defer cancel()
		defer close(out)
		for r := range wch {
			if r.Canceled || r.Err() != nil {
				return
			}
			if len(r.Events) > 0 {
				select {
				case out <- struct{}{}:
				default: // one is pending: the watcher reads after it
				}
			}
		}
	})
	if !started {
		return fail(ErrClosed)
	}
	return out, nil
}
