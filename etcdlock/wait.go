package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errKeyVanished is what lock returns when the waiting key is gone: the
// session's lease ended, or someone deleted the key.
var errKeyVanished = errors.New("etcdlock: the waiting key vanished (lease expired or key deleted)")

// errHeld is what lock returns, without waiting, when asked not to wait and
// a key was created before ours.
var errHeld = errors.New("etcdlock: held")

// lock creates the session's key under name, as concurrency.Mutex does and
// with the same layout (so the two, and `etcdctl lock`, exclude each other),
// and waits until it is the first-created key under name: every key created
// before it is gone. It returns the key's create revision (0 when the
// request that creates the key got no answer: the key may exist) and, once
// that revision is known, a nil error only when the key holds the lock.
//
// It differs from concurrency.Mutex.Lock in how it waits (see "Waiting" in
// the package documentation): the predecessor's watch starts at the
// revision after the read that found the predecessor, so that etcd
// registers it among its synced watchers at once. Mutex.Lock starts it at
// the read's own revision, which etcd serves from its unsynced group,
// caught up by a server loop every 100ms; a predecessor released before
// that catch-up was seen up to 100ms late. Reads are also folded: the
// creating transaction returns the predecessor, and after a wake-up one
// transaction returns the next predecessor and checks that our key still
// exists (three requests per wait-and-grant, against Mutex.Lock's five).
//
// value is the key's value: empty for a lock, as the Mutex writes it, and
// the candidate's value for an election's candidacy, as
// concurrency.Election.Campaign writes it. With wait false, lock returns
// errHeld rather than wait when a key was created before ours.
//
// lock deletes nothing on failure: the caller cleans up the key.
func (s *session) lock(ctx context.Context, name, value string, wait bool) (int64, error) {
	cli := s.cs.Client() // as the Mutex's: the Backend's view of its client
	pfx := name + "/"
	myKey := s.keyOf(name)
	// The Then branch runs the Get after the Put, so it sees our key: the
	// two last-created keys are ours and our predecessor, if any.
	//
	// The transaction is not abandoned when ctx ends, but bounded by the
	// request timeout: its outcome is then known, and the caller's
	// clean-up deletes the key by its create revision. Abandoned, it could
	// be applied after the clean-up's delete (etcd serves each request in
	// a goroutine of its own), leaving a key that holds the name for
	// nobody, with a stale value, for as long as the session lives.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.b.cfg.requestTimeout)
	defer cancel()
	resp, err := cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(myKey), "=", 0)).
		Then(clientv3.OpPut(myKey, value, clientv3.WithLease(s.id)),
			clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
				clientv3.WithLimit(2), clientv3.WithKeysOnly())).
		Else(clientv3.OpGet(myKey)).
		Commit()
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, err
	}
	var myRev int64
	var pred *mvccpb.KeyValue
	rev := resp.Header.Revision
	if resp.Succeeded {
		myRev = rev
		if kvs := resp.Responses[1].GetResponseRange().GetKvs(); len(kvs) == 2 {
			pred = kvs[1]
		}
	} else {
		// Our key exists already. Only the holder of the name's turn in
		// this Backend creates it, and a key that lingers keeps the turn
		// until it is deleted, so this should not happen; the Mutex takes
		// over such a key, and so does this, with the value asked for, as
		// concurrency.Election.Campaign does.
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return 0, errKeyVanished
		}
		myRev = kvs[0].CreateRevision
		if string(kvs[0].Value) != value {
			r, err := cli.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(myKey), "=", myRev)).
				Then(clientv3.OpPut(myKey, value, clientv3.WithLease(s.id))).
				Commit()
			switch {
			case err != nil:
				return myRev, err
			case !r.Succeeded:
				return myRev, errKeyVanished
			}
		}
		if pred, rev, err = s.predecessor(ctx, pfx, myKey, myRev); err != nil {
			return myRev, err
		}
	}
	if pred != nil && !wait {
		return myRev, errHeld
	}
	resyncs := 0
	for pred != nil {
		deleted, err := waitDelete(ctx, cli, string(pred.Key), pred.CreateRevision, rev, resyncs < maxResyncs, s.b.cfg.requestTimeout)
		if err != nil {
			return myRev, err
		}
		if deleted {
			resyncs = 0
		} else {
			resyncs++
		}
		if pred, rev, err = s.predecessor(ctx, pfx, myKey, myRev); err != nil {
			return myRev, err
		}
	}
	return myRev, nil
}

// maxResyncs bounds how many times in a row lock reads again and opens a
// new watch because the last one may have been unsynced (see waitDelete):
// on an etcd written to without pause, every watch may be, and the wait
// then goes on with the last watch rather than reading again and again.
const maxResyncs = 3

// predecessor reads, in one transaction, the last key created under pfx
// before myRev and whether myKey still exists with that create revision.
// It returns the predecessor (nil if there is none: we hold the lock) and
// the revision of the read.
func (s *session) predecessor(ctx context.Context, pfx, myKey string, myRev int64) (*mvccpb.KeyValue, int64, error) {
	resp, err := s.cs.Client().Txn(ctx).Then(
		clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
			clientv3.WithLimit(1), clientv3.WithMaxCreateRev(myRev-1), clientv3.WithKeysOnly()),
		clientv3.OpGet(myKey, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, 0, err
	}
	mine := resp.Responses[1].GetResponseRange().GetKvs()
	if len(mine) == 0 || mine[0].CreateRevision != myRev {
		return nil, 0, errKeyVanished
	}
	var pred *mvccpb.KeyValue
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
		pred = kvs[0]
	}
	return pred, resp.Header.Revision, nil
}

// waitDelete waits for key, found with create revision createRev by a read
// at revision rev, to be deleted (or created again) after rev. It reports
// false when it returns without having seen that: etcd compacted the
// revisions the watch starts at, or, if resync, the watch may have been
// registered among etcd's unsynced watchers (a write came between the read
// and the watch). The caller then reads again and watches from there.
//
// The watch outlives ctx until etcd has answered its creation, or for
// settle at most: the etcd client asks etcd to cancel a watch only once it
// knows the watch's id, so a watch abandoned while its creation is on its
// way stays registered in etcd until an event on key reaches it, which for
// a long-held lock may be never.
func waitDelete(ctx context.Context, cli *clientv3.Client, key string, createRev, rev int64, resync bool, settle time.Duration) (bool, error) {
	return waitEvent(ctx, cli, key, rev, resync, settle, func(ev *clientv3.Event) bool {
		return ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != createRev
	})
}

// waitEvent is waitDelete for any event that match accepts, on key (or
// the range that opts make of it), after the read at revision rev.
func waitEvent(ctx context.Context, cli *clientv3.Client, key string, rev int64, resync bool, settle time.Duration, match func(*clientv3.Event) bool, opts ...clientv3.OpOption) (bool, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	created := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(settle)
		defer t.Stop()
		select {
		case <-created:
		case <-t.C:
		}
		cancel()
	})
	defer stop()
	// Watch returns once etcd has answered the creation (or wctx ended).
	wch := cli.Watch(wctx, key, append([]clientv3.OpOption{clientv3.WithRev(rev + 1), clientv3.WithCreatedNotify()}, opts...)...)
	close(created)
	for {
		var wr clientv3.WatchResponse
		select {
		case <-ctx.Done():
			return false, ctx.Err() // cancel tells etcd
		case r, ok := <-wch:
			if !ok {
				if err := ctx.Err(); err != nil {
					return false, err
				}
				return false, fmt.Errorf("etcdlock: the watch of %q ended", key)
			}
			wr = r
		}
		switch {
		case wr.Created:
			// etcd read its revision just before registering the watch: if
			// it is past rev, something was written in between and the
			// watch may be unsynced, so that a delete it should report
			// comes late. Read again instead of waiting for it.
			if resync && wr.Header.Revision > rev {
				return false, nil
			}
			continue
		case errors.Is(wr.Err(), rpctypes.ErrCompacted):
			return false, nil
		case wr.Err() != nil:
			return false, wr.Err()
		}
		for _, ev := range wr.Events {
			if match(ev) {
				return true, nil
			}
		}
	}
}
