package etcdlock

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fence"
)

// Held is a grant to fence a transaction with. *distlock.Lock satisfies it,
// as do the leases this Backend returns.
type Held interface {
	Key() string
	Token() uint64
}

// Fence guards writes to etcd with the grants of a Backend: Cmp is a
// comparison for the If of an etcd transaction that holds only while a
// grant does, and Txn runs a transaction fenced with it. It counts the
// writes it refuses (distlock.fence.rejections, distlock.guard
// "etcdlock.Fence"; see fence.WithMeterProvider). It is safe for
// concurrent use.
type Fence struct {
	b        *Backend
	rejected *fence.Counter
}

// NewFence returns a Fence for the grants of b, configured by opts.
func NewFence(b *Backend, opts ...fence.Option) *Fence {
	return &Fence{b: b, rejected: fence.NewCounter("etcdlock.Fence", opts...)}
}

// Cmp returns a comparison for the If of an etcd transaction that holds
// only while lock's grant does: its etcd key exists with the lock's token
// as create revision. etcd evaluates it in the same step as the
// transaction's writes, so a holder that paused, lost its lock and woke up
// cannot slip a write in after the next holder's: the comparison fails
// instead. Put it in the If of a transaction on the Backend's Client (or
// any client of the same cluster); a transaction of your own that etcd
// refuses for it is not counted, as Txn's are.
//
// lock must be held through the Fence's Backend; otherwise, or once the
// Backend knows the lock to be released or lost, Cmp returns a
// *FenceError. A comparison obtained earlier stays usable: etcd itself
// refuses it when the grant has ended.
func (f *Fence) Cmp(lock Held) (clientv3.Cmp, error) {
	if f.b == nil {
		return clientv3.Cmp{}, fmt.Errorf("%w: etcdlock: fence of a nil Backend", driver.ErrInvalidOption)
	}
	if isNil(lock) {
		return clientv3.Cmp{}, fmt.Errorf("%w: etcdlock: nil lock", driver.ErrInvalidOption)
	}
	l := f.b.queue.Holder(f.b.KeyPath(lock.Key()))
	if l == nil || l.token != lock.Token() || l.ended() {
		return clientv3.Cmp{}, &FenceError{Key: lock.Key(), Token: lock.Token()}
	}
	return clientv3.Compare(clientv3.CreateRevision(l.etcdKey), "=", int64(l.token)), nil
}

// Txn runs ops in one etcd transaction fenced with lock (see Cmp): they
// take effect only if the grant still holds when etcd applies them. When
// they are refused it returns a *FenceError, which matches
// distlock.ErrLockLost and fence.ErrStaleToken, with etcd's response if etcd
// refused them (nil if the Backend already knew the grant had ended).
// Failures to reach etcd match distlock.ErrUnavailable; the transaction may
// then have been applied or not.
func (f *Fence) Txn(ctx context.Context, lock Held, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	cmp, err := f.Cmp(lock)
	if err != nil {
		if _, ok := err.(*FenceError); ok {
			f.rejected.Rejected(ctx)
		}
		return nil, err
	}
	resp, err := f.b.cli.Txn(ctx).If(cmp).Then(ops...).Commit()
	if err != nil {
		return nil, f.b.sortErr(ctx, nil, err)
	}
	if !resp.Succeeded {
		f.rejected.Rejected(ctx)
		return resp, &FenceError{Key: lock.Key(), Token: lock.Token()}
	}
	return resp, nil
}

var _ Held = (*distlock.Lock)(nil)

// isNil reports whether h is nil or a nil pointer of a type that holds a
// grant.
func isNil(h Held) bool {
	switch v := h.(type) {
	case nil:
		return true
	case *distlock.Lock:
		return v == nil
	case *lease:
		return v == nil
	}
	return false
}
