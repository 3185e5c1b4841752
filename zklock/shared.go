package zklock

// Shared (read) locks, in the layout of Curator's InterProcessReadWriteLock
// (see Shared locks in the package documentation).

import (
	"cmp"
	"context"
	"slices"

	"github.com/distlock/distlock/driver"
)

var _ driver.SharedLocks = (*Backend)(nil)

// AcquireShared implements driver.SharedLocks: it creates a protected
// ephemeral sequential node "_c_<uuid>-__READ__<sequence>" under
// KeyPath(key), as Curator's InterProcessReadWriteLock's read lock does,
// and is granted once no exclusive node is ahead of it in sequence order:
// no lock ("-lock-", this package's or Curator's InterProcessMutex's), no
// candidacy ("-latch-") and no writer ("__WRIT__", this package's with
// AcquireOptions.Writer or Curator's write lock), whether it holds or
// waits. Readers ahead of it do not block it. Meanwhile it watches the
// last exclusive node ahead of it. The grant is a lease as a lock's (see
// Guarantees), its token the node's czxid, its data opts.Owner (the
// host's name if empty). opts.Election and opts.Writer are ignored; a try
// (opts.Wait false) fails with distlock.ErrNotAcquired when an exclusive
// node is ahead of ours.
func (b *Backend) AcquireShared(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	opts.Election, opts.Writer = "", false
	a := &acquire{b: b, key: key, dir: b.KeyPath(key), opts: opts, shared: true}
	l, err := a.run(ctx)
	if err != nil {
		if ctx.Err() != nil && !errorsIsClosed(err) {
			return nil, driver.Canceled(ctx)
		}
		return nil, err
	}
	return l, nil
}

// Readers implements driver.SharedLocks: the "__READ__" nodes under
// exactly key's lock path that no exclusive node is ahead of (those that
// hold; one that waits is not listed), Curator's read locks' among them,
// by token (czxid), with their data as Owner and Shared set. Expires is
// zero, as for List.
func (b *Backend) Readers(ctx context.Context, key string) ([]driver.Holder, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	rctx, cancel := b.request(ctx)
	defer cancel()
	hs, err := b.grants(rctx, lockPath(b.cfg.prefix, key), true)
	if err != nil {
		return nil, b.sortErr(ctx, rctx, err)
	}
	readers := hs[:0]
	for _, h := range hs {
		if h.Shared {
			h.Key = key
			readers = append(readers, h)
		}
	}
	return readers, nil
}

// sortByToken sorts the shared grants of one key by token.
func sortByToken(hs []driver.Holder) {
	slices.SortFunc(hs, func(a, b driver.Holder) int { return cmp.Compare(a.Token, b.Token) })
}
