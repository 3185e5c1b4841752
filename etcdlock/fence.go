package etcdlock

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Held is a grant to fence a transaction with. *distlock.Lock satisfies it,
// as do the leases this Backend returns.
type Held interface {
	Key() string
	Token() uint64
}

// Fence returns a comparison for the If of an etcd transaction that holds
// only while lock's grant does: its etcd key exists with the lock's token as
// create revision. etcd evaluates it in the same step as the transaction's
// writes, so a holder that paused, lost its lock and woke up cannot slip a
// write in after the next holder's: the comparison fails instead. Put it in
// the If of a transaction on Client() (or any client of the same cluster).
//
// lock must be held through this Backend; otherwise, or once this Backend
// knows the lock to be released or lost, Fence returns a *FenceError. A
// comparison obtained earlier stays usable: etcd itself refuses it when the
// grant has ended. Fence is safe for concurrent use.
func (b *Backend) Fence(lock Held) (clientv3.Cmp, error) {
	if isNil(lock) {
		return clientv3.Cmp{}, fmt.Errorf("%w: etcdlock: nil lock", driver.ErrInvalidOption)
	}
	l := b.queue.Holder(b.KeyPath(lock.Key()))
	if l == nil || l.token != lock.Token() || l.ended() {
		return clientv3.Cmp{}, &FenceError{Key: lock.Key(), Token: lock.Token()}
	}
	return clientv3.Compare(clientv3.CreateRevision(l.etcdKey), "=", int64(l.token)), nil
}

// Txn runs ops in one etcd transaction fenced with lock (see Fence): they
// take effect only if the grant still holds when etcd applies them. When
// they are refused it returns a *FenceError, which matches
// distlock.ErrLockLost and fence.ErrStaleToken, with etcd's response if etcd
// refused them (nil if this Backend already knew the grant had ended).
// Failures to reach etcd match distlock.ErrUnavailable; the transaction may
// then have been applied or not. Txn is safe for concurrent use.
func (b *Backend) Txn(ctx context.Context, lock Held, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	cmp, err := b.Fence(lock)
	if err != nil {
		if _, ok := err.(*FenceError); ok {
			b.rejected.Rejected(ctx)
		}
		return nil, err
	}
	resp, err := b.cli.Txn(ctx).If(cmp).Then(ops...).Commit()
	if err != nil {
		return nil, b.sortErr(ctx, nil, err)
	}
	if !resp.Succeeded {
		b.rejected.Rejected(ctx)
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
