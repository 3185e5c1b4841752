package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/distlock/driver"
)

// maxTxnOps is the number of operations per transaction the Backend stays
// under (etcd's --max-txn-ops defaults to 128).
const maxTxnOps = 128

// lease is one grant: our key under the lock name, attached to the
// session's etcd lease. Its methods are safe for concurrent use.
type lease struct {
	b        *Backend
	s        *session
	turn     atomic.Pointer[turn] // the name's turn while the lease has it
	key      string               // as given to Acquire
	etcdKey  string               // name/<lease ID hex>
	token    uint64               // the create revision of etcdKey
	validity driver.Validity
	onLost   func(error)
	// candidacy says that the key is an election's candidate, whose value
	// is the candidate's (driver.AcquireOptions.Election).
	candidacy bool
	// shared says that the key is a reader's (AcquireShared), which holds
	// no turn of its name.
	shared bool

	mu    sync.Mutex
	state leaseState
}

type leaseState int

const (
	held           leaseState = iota
	releaseUnknown            // a release was sent but its answer never came
	ended                     // released or lost
)

var (
	_ driver.Lease       = (*lease)(nil)
	_ driver.OwnerSetter = (*lease)(nil)
)

// Token is the create revision of the lock's etcd key.
func (l *lease) Token() uint64 { return l.token }

// Key returns the key the lease was acquired for.
func (l *lease) Key() string { return l.key }

// Validity is the confirmation of the session's lease that the grant was
// reported with.
func (l *lease) Validity() driver.Validity { return l.validity }

// Refresh confirms the session's lease with one KeepAliveOnce sent after
// the call began (shared with concurrent refreshes of the same session) and
// checks that the lock key is still ours. The session's TTL applies: etcd
// leases keep the TTL they were granted with, so ttl only has to be
// positive.
func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	res := l.b.refresh(ctx, l.s, []*lease{l}, time.Now())
	return res[0].Validity, res[0].Err
}

// Release deletes the lock key if it is still ours. If it was gone (the
// session's lease ended, or the key was deleted by someone else) it returns
// an error matching distlock.ErrLockLost. If etcd does not answer, it
// returns an error matching distlock.ErrUnavailable and the Backend goes on
// deleting the key in the background (see the package documentation); a
// later Release is answered as if the first one had succeeded, once etcd
// answers and the session lives.
func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	st := l.state
	l.mu.Unlock()
	if st == ended {
		return fmt.Errorf("%w: etcdlock: %q with token %d was already released or lost", driver.ErrLockLost, l.key, l.token)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	b := l.b
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	// Only this lease's session writes keys at its path, and only while it
	// holds the name's turn in this Backend. While the lease holds the turn,
	// the key there is this grant's, and a plain delete is safe: etcd
	// applies it for less than a transaction that compares first (in etcd
	// 3.4 a transaction with writes also opens a read view, which copies the
	// pending writes). Taking the turn before the delete keeps a loss
	// reported meanwhile from passing it on while the delete is in flight.
	// Without the turn (a clean-up of an earlier attempt has or had it),
	// the delete compares the create revision.
	t := b.takeOverTurn(l)
	var gone bool // the key was this grant's, and is deleted
	var err error
	if t != nil {
		var resp *clientv3.DeleteResponse
		if resp, err = b.cli.Delete(rctx, l.etcdKey); err == nil {
			gone = resp.Deleted == 1
		}
	} else {
		var resp *clientv3.TxnResponse
		resp, err = b.cli.Txn(rctx).
			If(clientv3.Compare(clientv3.CreateRevision(l.etcdKey), "=", int64(l.token))).
			Then(clientv3.OpDelete(l.etcdKey)).
			Commit()
		if err == nil {
			gone = resp.Succeeded
		}
	}
	if err != nil {
		// The delete may or may not have happened. Delete the key in the
		// background, holding the turn, so that it does not linger, kept
		// alive by the session, if the caller does not retry.
		l.mu.Lock()
		first := l.state == held // a reader's first failed release drops its key
		if first {
			l.state = releaseUnknown
		}
		l.mu.Unlock()
		if t != nil || l.shared && first {
			b.dropKey(t, l.s, l.etcdKey, int64(l.token), func() { l.s.remove(l) })
		}
		return b.sortErr(ctx, rctx, err)
	}
	l.mu.Lock()
	prev := l.state
	l.state = ended
	l.mu.Unlock()
	l.s.remove(l)
	if t != nil {
		t.Done()
	}
	switch {
	case gone:
		return nil
	case prev == releaseUnknown && l.s.lostErr() == nil:
		return nil // the earlier attempt did delete it
	case prev == ended:
		return fmt.Errorf("%w: etcdlock: %q with token %d was lost while releasing", driver.ErrLockLost, l.key, l.token)
	}
	return fmt.Errorf("%w: etcdlock: the key of %q with token %d was gone (its session's lease ended or the key was deleted)", driver.ErrLockLost, l.key, l.token)
}

// SetOwner implements driver.OwnerSetter for an election's candidacy: it
// replaces the value of the candidate's key, with
// concurrency.Election.Proclaim, which compares the key's create revision
// with the token first, so that a term that ended changes nothing (the
// error then matches distlock.ErrLockLost). A lock's owner is its
// session's, shared with other locks: changing it is unsupported.
func (l *lease) SetOwner(ctx context.Context, owner string) error {
	if !l.candidacy {
		return fmt.Errorf("etcdlock: a lock's owner is its session's: %w", errors.ErrUnsupported)
	}
	if l.ended() {
		return fmt.Errorf("%w: etcdlock: %q with token %d was released or lost", driver.ErrLockLost, l.key, l.token)
	}
	b := l.b
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	e := concurrency.ResumeElection(l.s.cs, strings.TrimSuffix(l.etcdKey, l.s.keySuffix), l.etcdKey, int64(l.token))
	switch err := e.Proclaim(rctx, owner); {
	case errors.Is(err, concurrency.ErrElectionNotLeader):
		cause := fmt.Errorf("etcdlock: the key of %q with token %d was gone when proclaiming", l.key, l.token)
		l.lose(cause)
		return fmt.Errorf("%w: %w", driver.ErrLockLost, cause)
	case err != nil:
		return b.sortErr(ctx, rctx, err)
	}
	return nil
}

// lose ends the lease because the service no longer holds it, and tells
// the holder, once.
func (l *lease) lose(cause error) {
	l.mu.Lock()
	if l.state == ended {
		l.mu.Unlock()
		return
	}
	l.state = ended
	l.mu.Unlock()
	l.s.remove(l)
	l.b.endTurn(l)
	if l.onLost != nil {
		l.onLost(fmt.Errorf("%w: %w", driver.ErrLockLost, cause))
	}
}

func (l *lease) ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == ended
}

// RefreshAll implements driver.BatchRefresher: one KeepAliveOnce per
// session and one transaction reading the lock keys, in parallel, whatever
// the number of leases, and a permit's Refresh for each permit, in
// parallel too. As with Refresh, the sessions' TTLs apply.
func (b *Backend) RefreshAll(ctx context.Context, leases []driver.Lease, ttl time.Duration) []driver.RefreshResult {
	start := time.Now()
	res := make([]driver.RefreshResult, len(leases))
	ttlErr := driver.CheckTTL(ttl)
	bySession := map[*session][]int{}
	var permits []int
	for i, dl := range leases {
		if p := b.permitOf(dl); p != nil {
			if ttlErr != nil {
				res[i].Err = ttlErr
			} else {
				permits = append(permits, i)
			}
			continue
		}
		l, ok := dl.(*lease)
		switch {
		case !ok || l == nil || l.b != b:
			res[i].Err = fmt.Errorf("%w: etcdlock: lease %T is not from this backend", driver.ErrInvalidOption, dl)
		case ttlErr != nil:
			res[i].Err = ttlErr
		default:
			bySession[l.s] = append(bySession[l.s], i)
		}
	}
	var wg sync.WaitGroup
	for _, i := range permits {
		wg.Go(func() { res[i].Validity, res[i].Err = b.permitOf(leases[i]).refresh(ctx, start) })
	}
	for s, idx := range bySession {
		wg.Go(func() {
			ls := make([]*lease, len(idx))
			for j, i := range idx {
				ls[j] = leases[i].(*lease)
			}
			for j, r := range b.refresh(ctx, s, ls, start) {
				res[idx[j]] = r
			}
		})
	}
	wg.Wait()
	return res
}

// refresh confirms s's lease (with a request sent at or after start) and
// checks that each lease's key is still its own.
func (b *Backend) refresh(ctx context.Context, s *session, ls []*lease, start time.Time) []driver.RefreshResult {
	res := make([]driver.RefreshResult, len(ls))
	var live []int
	for i, l := range ls {
		if l.ended() {
			res[i].Err = fmt.Errorf("%w: etcdlock: %q with token %d was released or lost", driver.ErrLockLost, l.key, l.token)
			continue
		}
		live = append(live, i)
	}
	if len(live) == 0 {
		return res
	}

	var v driver.Validity
	var cerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		v, cerr = s.confirm(ctx, start)
	}()
	present, kerr := b.readKeys(ctx, ls, live)
	<-done

	for _, i := range live {
		l := ls[i]
		switch {
		case cerr != nil:
			res[i].Err = cerr // lost with its session, or unavailable
		case kerr != nil:
			res[i].Err = kerr
		case !present[i]:
			cause := fmt.Errorf("etcdlock: the key of %q with token %d was deleted while its session lived", l.key, l.token)
			l.lose(cause)
			res[i].Err = fmt.Errorf("%w: %w", driver.ErrLockLost, cause)
		default:
			res[i].Validity = v
		}
	}
	return res
}

// readKeys reports, for each index in idx, whether ls[i]'s key still exists
// with its token as create revision.
func (b *Backend) readKeys(ctx context.Context, ls []*lease, idx []int) (map[int]bool, error) {
	present := make(map[int]bool, len(idx))
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	for len(idx) > 0 {
		n := min(len(idx), maxTxnOps)
		ops := make([]clientv3.Op, n)
		for j, i := range idx[:n] {
			ops[j] = clientv3.OpGet(ls[i].etcdKey, clientv3.WithKeysOnly())
		}
		resp, err := b.cli.Txn(rctx).Then(ops...).Commit()
		if err != nil {
			return nil, b.sortErr(ctx, rctx, err)
		}
		for j, i := range idx[:n] {
			kvs := resp.Responses[j].GetResponseRange().GetKvs()
			present[i] = len(kvs) == 1 && uint64(kvs[0].CreateRevision) == ls[i].token
		}
		idx = idx[n:]
	}
	return present, nil
}
