package etcdlock

// Shared (read) locks (driver.SharedLocks), in the layout that "Key
// layout and etcdctl" in the package documentation gives: a reader's key
// sits under the lock name among the Mutex's keys, ranked with them by
// create revision, and is told apart by its name. How a reader waits is
// in "Waiting".

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

var _ driver.SharedLocks = (*Backend)(nil)

// sharedTag marks a reader's key: NAME/<lease ID hex>.shared.<n>, where n
// tells apart the readers of one session. A Mutex key's last part is the
// lease ID in hexadecimal alone, so no Mutex key has it.
const sharedTag = ".shared."

// isShared reports whether key, a key under a lock name, is a reader's.
func isShared(key []byte) bool {
	i := strings.LastIndexByte(string(key), '/')
	return strings.Contains(string(key[i+1:]), sharedTag)
}

// AcquireShared implements driver.SharedLocks: it creates a reader's key
// under key's lock name (see KeyPath), on the session of opts.TTL and
// opts.Owner as a lock's, and grants it once no key that is not a
// reader's (a lock's, distlock's or `etcdctl lock`'s, or a candidate's)
// was created before it: readers created after a writer's key wait for
// that writer, and a writer waits for every key before its own, readers
// included. A try (opts.Wait false) fails with distlock.ErrNotAcquired
// when such a key exists, or while an exclusive acquire of the key
// through this Backend is under way (asked and not yet returned: waiting
// for the turn or in etcd, or creating its key): a reader asked while one
// is under way queues behind it in this process, and creates its key only
// when the acquire's grant ends. A reader that has the key's turn to
// create its own key does not make a try fail. Its token is its key's
// create revision. opts.Election and opts.Writer are ignored.
//
// A waiter whose session ends while it waits gets an error matching
// distlock.ErrUnavailable and ErrSessionLost, never the lock. An acquire
// that fails or is cancelled deletes its key; if etcd does not answer
// within the request timeout, a goroutine goes on deleting it.
func (b *Backend) AcquireShared(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	name := b.KeyPath(key)
	t, err := b.sharedTurn(ctx, name, opts.Wait)
	if err != nil {
		return nil, err
	}
	passed := false
	pass := func() {
		if t != nil && !passed {
			passed = true
			t.Done()
		}
	}
	defer pass()
	s, err := b.session(ctx, ttlSeconds(opts.TTL), opts.Owner)
	if err != nil {
		if ctx.Err() != nil {
			return nil, driver.Canceled(ctx)
		}
		return nil, err
	}
	myKey := s.keyOf(name) + sharedTag + strconv.FormatUint(b.readerSeq.Add(1), 10)

	// The wait runs in the caller's goroutine, as a lock's, and ends when
	// the session does.
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.cs.Ctx(), func() { cancel(ErrSessionLost) })
	defer stop()
	rev, err := s.lockShared(lctx, name, myKey, opts.Wait, pass)
	pass()
	switch {
	case errors.Is(err, errHeld):
		b.cleanup(nil, s, myKey, rev)
		if ctx.Err() != nil {
			return nil, driver.Canceled(ctx)
		}
		return nil, fmt.Errorf("%w: etcdlock: held by a writer, or a writer waits", driver.ErrNotAcquired)
	case err != nil:
		err = b.lockErr(ctx, s, err)
	}
	l, err := b.finish(lctx, nil, s, key, myKey, rev, opts, true, err)
	switch {
	case ctx.Err() == nil:
		return l, err
	case err == nil:
		b.releaseUnwanted(l) // granted as the caller gave up
	}
	return nil, driver.Canceled(ctx)
}

// sharedTurn keeps a reader's place behind the exclusive acquires of name
// through this Backend that are under way (asked and not yet returned),
// which hold name's turn, or wait for it, from before their key is
// created until their grant ends. When none is under way, the reader needs
// no turn (it returns nil), whoever has it: a reader that is creating its
// key, a granted lock or a clean-up, whose keys in etcd the reader's own
// key sees as any other; so readers do not queue behind each other.
// Otherwise a reader waits for the turn, which it keeps until its own key
// is created, and a try fails: such an acquire holds, waits or is being
// acquired.
func (b *Backend) sharedTurn(ctx context.Context, name string, wait bool) (*turn, error) {
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	if t, ok := b.queue.Try(name); ok {
		t.Done()
		return nil, nil
	}
	if b.writersOf(name) == 0 {
		return nil, nil
	}
	if !wait {
		return nil, fmt.Errorf("%w: etcdlock: a writer waits or is being acquired through this backend", driver.ErrNotAcquired)
	}
	return b.takeTurn(ctx, name, true)
}

// addWriter adds n to the count of name's exclusive acquires under way.
func (b *Backend) addWriter(name string, n int) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if b.writers == nil {
		b.writers = map[string]int{}
	}
	if c := b.writers[name] + n; c > 0 {
		b.writers[name] = c
	} else {
		delete(b.writers, name)
	}
}

// writersOf returns the number of name's exclusive acquires under way.
func (b *Backend) writersOf(name string) int {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	return b.writers[name]
}

// lockShared creates the reader's key myKey under name and waits until
// no key that is not a reader's was created before it under name. It
// calls created once the outcome of the transaction that creates the key
// is known. It returns the key's create revision (0 if the creation got no
// answer: the key may exist), and errHeld, without waiting, when wait is
// false and a writer's key comes before it. It deletes nothing on
// failure: the caller cleans up the key.
func (s *session) lockShared(ctx context.Context, name, myKey string, wait bool, created func()) (int64, error) {
	cli := s.cs.Client()
	pfx := name + "/"
	// As in lock, the transaction is not abandoned when ctx ends, so that
	// the clean-up comes after it. Its Get sees our key first, then every
	// key created before it, latest first.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.b.cfg.requestTimeout)
	resp, err := cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(myKey), "=", 0)).
		Then(clientv3.OpPut(myKey, "", clientv3.WithLease(s.id)),
			clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
				clientv3.WithKeysOnly())).
		Commit()
	cancel()
	created()
	switch {
	case err != nil && ctx.Err() != nil:
		return 0, ctx.Err()
	case err != nil:
		return 0, err
	case !resp.Succeeded:
		// The Backend numbers its readers' keys: none exists before it
		// is created, unless someone wrote it by hand.
		return 0, fmt.Errorf("etcdlock: the reader's key %q exists already", myKey)
	}
	myRev, rev := resp.Header.Revision, resp.Header.Revision
	pred := lastWriter(resp.Responses[1].GetResponseRange().GetKvs(), myRev)
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
		if pred, rev, err = s.writerBefore(ctx, pfx, myKey, myRev); err != nil {
			return myRev, err
		}
	}
	return myRev, nil
}

// lastWriter returns the last key of kvs, sorted by create revision,
// latest first, that was created before myRev and is not a reader's.
func lastWriter(kvs []*mvccpb.KeyValue, myRev int64) *mvccpb.KeyValue {
	for _, kv := range kvs {
		if kv.CreateRevision < myRev && !isShared(kv.Key) {
			return kv
		}
	}
	return nil
}

// writerBefore reads, in one transaction, the last key that is not a
// reader's created under pfx before myRev, and whether myKey still exists
// with that create revision. It returns that key (nil if there is none:
// the reader holds) and the revision of the read.
func (s *session) writerBefore(ctx context.Context, pfx, myKey string, myRev int64) (*mvccpb.KeyValue, int64, error) {
	resp, err := s.cs.Client().Txn(ctx).Then(
		clientv3.OpGet(pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend),
			clientv3.WithMaxCreateRev(myRev-1), clientv3.WithKeysOnly()),
		clientv3.OpGet(myKey, clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return nil, 0, err
	}
	mine := resp.Responses[1].GetResponseRange().GetKvs()
	if len(mine) == 0 || mine[0].CreateRevision != myRev {
		return nil, 0, errKeyVanished
	}
	return lastWriter(resp.Responses[0].GetResponseRange().GetKvs(), myRev), resp.Header.Revision, nil
}

// Readers implements driver.SharedLocks: the readers' keys under key's
// lock name created before every key there that is not a reader's, by
// create revision (their tokens), with their session's owner and when
// their etcd lease expires unless kept alive.
func (b *Backend) Readers(ctx context.Context, key string) ([]driver.Holder, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	resp, err := b.cli.Get(rctx, b.KeyPath(key)+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithKeysOnly())
	if err != nil {
		return nil, b.sortErr(ctx, rctx, err)
	}
	var kvs []*mvccpb.KeyValue
	for _, kv := range resp.Kvs {
		if !isShared(kv.Key) {
			break
		}
		kvs = append(kvs, kv)
	}
	if len(kvs) == 0 {
		return nil, nil
	}
	owners, err := b.owners(rctx, kvs)
	if err != nil {
		return nil, b.sortErr(ctx, rctx, err)
	}
	hs := make([]driver.Holder, len(kvs))
	leases := map[int64][]int{}
	for i, kv := range kvs {
		hs[i] = driver.Holder{Key: key, Token: uint64(kv.CreateRevision), Owner: owners[kv.Lease], Shared: true}
		if kv.Lease != 0 {
			leases[kv.Lease] = append(leases[kv.Lease], i)
		}
	}
	b.fillExpiry(rctx, hs, leases)
	return hs, nil
}

// owners reads, in one transaction per maxTxnOps leases, the owners that
// the sessions of kvs' leases recorded.
func (b *Backend) owners(ctx context.Context, kvs []*mvccpb.KeyValue) (map[int64]string, error) {
	var ids []int64
	for _, kv := range kvs {
		if kv.Lease != 0 && !slices.Contains(ids, kv.Lease) {
			ids = append(ids, kv.Lease)
		}
	}
	owners := make(map[int64]string, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), maxTxnOps)
		ops := make([]clientv3.Op, n)
		for i, id := range ids[:n] {
			ops[i] = clientv3.OpGet(b.ownerKey(clientv3.LeaseID(id)))
		}
		resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		for i, id := range ids[:n] {
			if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) == 1 {
				owners[id] = string(kvs[0].Value)
			}
		}
		ids = ids[n:]
	}
	return owners, nil
}
