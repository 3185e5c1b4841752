package etcdlock

// Permits of counting semaphores (driver.Semaphores), in the layout that
// "Permits" in the package documentation gives: an entry per asker, on an
// etcd lease of its own, ranked by create revision; the limit in every
// entry; a permit claimed by writing its entry again. How an asker waits
// is in "Waiting".

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Semaphores = (*Backend)(nil)
	_ driver.Lease      = (*permit)(nil)
	_ driver.SlotLease  = slotPermit{}
)

// The directories, under the Backend's prefix, of semaphores' entries and
// slots. No lock name starts with "%00": keys never contain NUL, and
// escaping never writes "%00".
const (
	semDir  = "%00sem/"
	slotDir = "%00slot/"
)

// permitDir is the directory of the entries of the semaphore at key.
func (b *Backend) permitDir(key string) string { return b.cfg.prefix + semDir + escapeKey(key) + "/" }

// slotsDir is the directory of the slots of the semaphore at key.
func (b *Backend) slotsDir(key string) string { return b.cfg.prefix + slotDir + escapeKey(key) + "/" }

// AcquirePermit implements driver.Semaphores (see "Semaphores" in the
// package documentation). A permit has an etcd lease of its own, with
// opts.TTL rounded up to whole seconds (or etcd's minimum), which Refresh
// renews and Release revokes. Waiters are served in the order etcd
// created their entries, and a release wakes the first waiter alone. An
// acquire that fails or is cancelled revokes its lease, which deletes its
// entry, and gives back a permit granted as it left; if etcd does not
// answer within the request timeout, a goroutine goes on revoking it, or
// the lease lapses within its TTL.
func (b *Backend) AcquirePermit(ctx context.Context, key string, sem driver.Semaphore, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckPermit(ctx, key, sem, opts); err != nil {
		return nil, err
	}
	// Close waits for the acquire, so that its lease is revoked before an
	// owned client is closed: otherwise its entry would stay until its
	// TTL, queueing every other asker behind it.
	if !b.life.Enter() {
		return nil, ErrClosed
	}
	defer b.life.Leave()
	// The acquire's requests carry the request timeout to etcd, not the
	// caller's deadline: etcd would answer one that passes with "request
	// timed out", which can arrive before ctx reports its end, and read as
	// etcd being unavailable. ctx's end, and Close, cancel them.
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopCtx := context.AfterFunc(ctx, cancel)
	defer stopCtx()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()
	a := &ask{b: b, key: key, sem: sem, opts: opts, secs: ttlSeconds(opts.TTL),
		dir: b.permitDir(key), slots: b.slotsDir(key), limit: strconv.Itoa(sem.Limit)}
	p, err := a.acquire(actx)
	if err == nil {
		b.mu.Lock()
		if !b.life.Closed() && ctx.Err() == nil {
			b.permits[p] = struct{}{}
			b.mu.Unlock()
			if sem.Slots {
				return slotPermit{p}, nil
			}
			return p, nil
		}
		b.mu.Unlock()
	}
	if a.id != 0 {
		_ = b.revokePermit(a.id, nil) // its entry, and a permit granted as it left
	}
	switch {
	case b.life.Closed():
		return nil, ErrClosed
	case ctx.Err() != nil:
		return nil, driver.Canceled(ctx)
	}
	return nil, err
}

// ask is one AcquirePermit.
type ask struct {
	b     *Backend
	key   string
	sem   driver.Semaphore
	opts  driver.AcquireOptions
	secs  int64
	dir   string // permitDir(key)
	slots string // slotsDir(key)
	limit string // sem.Limit in decimal: every entry's value

	id       clientv3.LeaseID // the lease, once granted by etcd
	sent     time.Time        // before the lease's grant was sent
	ttl      time.Duration    // the lease's TTL, as etcd granted it
	entry    string           // dir + the lease ID in hex
	created  int64            // the entry's create revision
	slotKeys []*mvccpb.KeyValue
}

// line is where an entry stands, as a read at rev saw it.
type line struct {
	rev    int64
	before []*mvccpb.KeyValue // up to limit entries created before ours, the latest first
	more   bool               // more than len(before) entries are before ours
}

func (l line) admitted(limit int) bool { return len(l.before) < limit }

// first reports whether the entry is the first waiter: exactly limit
// entries are before it.
func (l line) first(limit int) bool { return len(l.before) == limit && !l.more }

func (a *ask) acquire(ctx context.Context) (*permit, error) {
	b := a.b
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	a.sent = time.Now()
	g, err := b.cli.Grant(rctx, a.secs)
	if err != nil {
		// A lease granted without its answer reaching us holds nothing, and
		// lapses within its TTL.
		return nil, b.sortErr(ctx, rctx, err)
	}
	a.id, a.ttl = g.ID, time.Duration(g.TTL)*time.Second
	a.entry = a.dir + strconv.FormatInt(int64(g.ID), 16)

	l, err := a.enter(ctx)
	if err != nil {
		return nil, err
	}
	waited := false
	if !l.admitted(a.sem.Limit) {
		if !a.opts.Wait {
			return nil, fmt.Errorf("%w: etcdlock: all %d permits held or awaited", driver.ErrNotAcquired, a.sem.Limit)
		}
		if err := a.wait(ctx, l); err != nil {
			return nil, err
		}
		waited = true
	}
	return a.claim(ctx, waited)
}

// enter creates the entry, if every entry of the semaphore holds the same
// limit or there is none, and reads where it stands; otherwise it returns
// a *driver.LimitError, having written nothing. A transaction whose
// answer is lost cannot create the entry later: the caller revokes the
// lease, and etcd refuses a write on a revoked lease.
func (a *ask) enter(ctx context.Context) (line, error) {
	b := a.b
	ops := []clientv3.Op{clientv3.OpPut(a.entry, a.limit, clientv3.WithLease(a.id))}
	if a.opts.Owner != "" {
		ops = append(ops, clientv3.OpPut(b.ownerKey(a.id), a.opts.Owner, clientv3.WithLease(a.id)))
	}
	read := len(ops)
	// After the put, the latest-created entry is ours.
	ops = append(ops, clientv3.OpGet(a.dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(int64(a.sem.Limit)+1)))
	if a.sem.Slots {
		ops = append(ops, clientv3.OpGet(a.slots, clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	// A compare of a value over a range holds when every key of the range
	// has it, and fails when the range is empty: hence the nested
	// transaction for an empty semaphore.
	resp, err := b.cli.Txn(rctx).
		If(clientv3.Compare(clientv3.Value(a.dir).WithPrefix(), "=", a.limit)).
		Then(ops...).
		Else(clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(a.dir).WithPrefix(), "=", 0)},
			ops,
			[]clientv3.Op{clientv3.OpGet(a.dir, clientv3.WithPrefix(), clientv3.WithLimit(1))})).
		Commit()
	if err != nil {
		return line{}, b.sortErr(ctx, rctx, err)
	}
	rs := resp.Responses
	if !resp.Succeeded {
		inner := rs[0].GetResponseTxn()
		if !inner.Succeeded {
			stored := driver.UnknownLimit
			if kvs := inner.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
				if n, err := strconv.Atoi(string(kvs[0].Value)); err == nil {
					stored = n
				}
			}
			return line{}, &driver.LimitError{Stored: stored, Asked: a.sem.Limit}
		}
		rs = inner.Responses
	}
	rr := rs[read].GetResponseRange()
	if len(rr.Kvs) == 0 || string(rr.Kvs[0].Key) != a.entry {
		return line{}, fmt.Errorf("%w: etcdlock: the entry %q was not the latest after its creation", driver.ErrUnavailable, a.entry)
	}
	a.created = rr.Kvs[0].CreateRevision
	if a.sem.Slots {
		a.slotKeys = rs[read+1].GetResponseRange().GetKvs()
	}
	return line{rev: resp.Header.Revision, before: rr.Kvs[1:], more: rr.More}, nil
}

// wait waits until the entry is admitted, keeping its lease alive.
func (a *ask) wait(ctx context.Context, l line) error {
	b := a.b
	cs, err := concurrency.NewSession(b.view, concurrency.WithLease(a.id), concurrency.WithTTL(int(a.secs)))
	if err != nil {
		return fmt.Errorf("%w: etcdlock: keep-alive: %w", driver.ErrUnavailable, err)
	}
	defer cs.Orphan() // the permit's holder renews it from now on
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A waiter whose lease ends stops waiting: its entry is gone.
	stop := context.AfterFunc(cs.Ctx(), func() { cancel(ErrSessionLost) })
	defer stop()
	limit := a.sem.Limit
	resyncs := 0
	for !l.admitted(limit) {
		var woke bool
		if l.first(limit) {
			// Only a deletion of an entry before ours admits us, or of
			// ours ends the wait.
			woke, err = waitEvent(wctx, b.cli, a.dir, l.rev, resyncs < maxResyncs, b.cfg.requestTimeout,
				func(ev *clientv3.Event) bool { return ev.PrevKv == nil || ev.PrevKv.CreateRevision <= a.created },
				clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithPrevKV())
		} else {
			// The entry before ours: granted, it leaves us first in line
			// (or admitted); deleted, we read again.
			woke, err = waitEvent(wctx, b.cli, string(l.before[0].Key), l.rev, resyncs < maxResyncs, b.cfg.requestTimeout,
				func(*clientv3.Event) bool { return true })
		}
		if err != nil {
			return a.waitErr(ctx, wctx, cs, err)
		}
		if woke {
			resyncs = 0
		} else {
			resyncs++
		}
		if l, err = a.stand(wctx); err != nil {
			return a.waitErr(ctx, wctx, cs, err)
		}
	}
	return nil
}

// waitErr sorts an error of wait.
func (a *ask) waitErr(ctx, wctx context.Context, cs *concurrency.Session, err error) error {
	switch {
	case ctx.Err() != nil:
		return driver.Canceled(ctx)
	case cs.Ctx().Err() != nil || errors.Is(context.Cause(wctx), ErrSessionLost):
		return fmt.Errorf("%w: %w: the keep-alive of a waiting permit's lease ended", driver.ErrUnavailable, ErrSessionLost)
	case errors.Is(err, errKeyVanished):
		return fmt.Errorf("%w: %w: a waiting permit's entry vanished (lease expired or key deleted)", driver.ErrUnavailable, ErrSessionLost)
	}
	return a.b.sortErr(ctx, nil, err)
}

// stand reads, in one transaction, where the entry stands, whether it
// still exists, and the slots' keys if a slot is asked for.
func (a *ask) stand(ctx context.Context) (line, error) {
	b := a.b
	ops := []clientv3.Op{
		clientv3.OpGet(a.dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMaxCreateRev(a.created-1),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(int64(a.sem.Limit))),
		clientv3.OpGet(a.entry, clientv3.WithKeysOnly()),
	}
	if a.sem.Slots {
		ops = append(ops, clientv3.OpGet(a.slots, clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	resp, err := b.cli.Txn(rctx).Then(ops...).Commit()
	if err != nil {
		return line{}, err
	}
	if mine := resp.Responses[1].GetResponseRange().GetKvs(); len(mine) == 0 || mine[0].CreateRevision != a.created {
		return line{}, errKeyVanished
	}
	if a.sem.Slots {
		a.slotKeys = resp.Responses[2].GetResponseRange().GetKvs()
	}
	rr := resp.Responses[0].GetResponseRange()
	return line{rev: resp.Header.Revision, before: rr.Kvs, more: rr.More}, nil
}

// claim grants the admitted entry its permit: it writes the entry again,
// if it still exists, and creates the lowest free slot's key, if that slot
// is still free (else it tries the next). The write's revision is the
// token.
func (a *ask) claim(ctx context.Context, waited bool) (*permit, error) {
	b := a.b
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	p := &permit{b: b, key: a.key, id: a.id, entry: a.entry, created: a.created, slot: -1, onLost: a.opts.OnLost}
	// The grant must come with a confirmation of the lease recent enough
	// for the Client to use: the lease's grant, or else a KeepAliveOnce,
	// sent with the claim so as not to add a round trip.
	p.validity = driver.Validity{Sent: a.sent, TTL: a.ttl}
	var (
		ka     *clientv3.LeaseKeepAliveResponse
		kaErr  error
		kaSent time.Time
		kaDone chan struct{}
	)
	if waited || time.Since(a.sent) > a.ttl/4 {
		kaSent, kaDone = time.Now(), make(chan struct{})
		go func() {
			defer close(kaDone)
			ka, kaErr = b.cli.KeepAliveOnce(rctx, a.id)
		}()
		defer func() { <-kaDone }()
	}
	for {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(a.entry), "=", a.created)}
		then := []clientv3.Op{clientv3.OpPut(a.entry, a.limit, clientv3.WithLease(a.id))}
		els := []clientv3.Op{clientv3.OpGet(a.entry, clientv3.WithKeysOnly())}
		if a.sem.Slots {
			slot, ok := freeSlot(a.slots, a.slotKeys, a.sem.Limit)
			if !ok {
				return nil, fmt.Errorf("%w: etcdlock: no free slot under %q for an admitted permit (keys written by hand?)", driver.ErrUnavailable, a.slots)
			}
			p.slot = slot
			slotKey := a.slots + strconv.Itoa(slot)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(slotKey), "=", 0))
			then = append(then, clientv3.OpPut(slotKey, a.entry, clientv3.WithLease(a.id)))
			els = append(els, clientv3.OpGet(a.slots, clientv3.WithPrefix(), clientv3.WithKeysOnly()))
		}
		resp, err := b.cli.Txn(rctx).If(cmps...).Then(then...).Else(els...).Commit()
		if err != nil {
			return nil, b.sortErr(ctx, rctx, err)
		}
		if resp.Succeeded {
			p.token = uint64(resp.Header.Revision)
			break
		}
		if mine := resp.Responses[0].GetResponseRange().GetKvs(); len(mine) == 0 || mine[0].CreateRevision != a.created {
			return nil, fmt.Errorf("%w: %w: an admitted permit's entry vanished (lease expired or key deleted)", driver.ErrUnavailable, ErrSessionLost)
		}
		a.slotKeys = resp.Responses[1].GetResponseRange().GetKvs() // the slot was taken meanwhile
	}
	if kaDone != nil {
		<-kaDone
		switch {
		case errors.Is(kaErr, rpctypes.ErrLeaseNotFound):
			return nil, fmt.Errorf("%w: %w: granted on a lease that had ended", driver.ErrUnavailable, ErrSessionLost)
		case kaErr != nil:
			return nil, b.sortErr(ctx, rctx, kaErr)
		}
		p.validity = driver.Validity{Sent: kaSent, TTL: time.Duration(ka.TTL) * time.Second}
	}
	return p, nil
}

// freeSlot returns the lowest slot below limit that no key under dir
// names.
func freeSlot(dir string, kvs []*mvccpb.KeyValue, limit int) (int, bool) {
	taken := make(map[int]bool, len(kvs))
	for _, kv := range kvs {
		if n, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), dir)); err == nil {
			taken[n] = true
		}
	}
	for slot := range limit {
		if !taken[slot] {
			return slot, true
		}
	}
	return 0, false
}

// revokePermit revokes a permit's lease, which deletes its entry, slot
// and owner keys at once. If etcd does not answer within the request
// timeout, it returns the error and a goroutine goes on revoking the lease
// until etcd answers or the Backend closes (the lease, which nobody
// renews, lapses within its TTL anyway); gone, if not nil, runs once etcd
// has answered.
func (b *Backend) revokePermit(id clientv3.LeaseID, gone func()) error {
	revoke := func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
		defer cancel()
		_, err := b.cli.Revoke(rctx, id)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) || permanent(err) {
			return nil // gone already, or a retry cannot help: it lapses
		}
		return err
	}
	err := revoke(context.Background())
	if err == nil {
		if gone != nil {
			gone()
		}
		return nil
	}
	b.life.Go(func() {
		pauses := driver.ExponentialBackoff(min(dropRetryMin, b.cfg.requestTimeout), dropRetryMax)
		err := driver.Retry(b.ctx, pauses, revoke)
		if err == nil && gone != nil {
			gone()
		}
	})
	return fmt.Errorf("%w: etcdlock: revoke lease %x: %w", driver.ErrUnavailable, int64(id), err)
}

// Permits implements driver.Semaphores: the stored limit is an entry's
// value, the holders are the entries written again by their grant, each
// with that write's revision as token, and the others wait.
func (b *Backend) Permits(ctx context.Context, key string) (driver.PermitState, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.PermitState{}, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return driver.PermitState{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	dir, slots := b.permitDir(key), b.slotsDir(key)
	resp, err := b.cli.Txn(rctx).Then(
		clientv3.OpGet(dir, clientv3.WithPrefix()),
		clientv3.OpGet(slots, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return driver.PermitState{}, b.sortErr(ctx, rctx, err)
	}
	slotOf := map[string]int{} // entry -> slot
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		if n, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), slots)); err == nil {
			slotOf[string(kv.Value)] = n
		}
	}
	var st driver.PermitState
	var owners []clientv3.Op
	leases := map[int64][]int{}
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		if st.Limit == 0 {
			st.Limit = driver.UnknownLimit
			if n, err := strconv.Atoi(string(kv.Value)); err == nil {
				st.Limit = n
			}
		}
		if kv.Version < 2 {
			st.Waiting++
			continue
		}
		h := driver.Holder{Key: key, Token: uint64(kv.ModRevision)}
		h.Slot, h.HasSlot = slotOf[string(kv.Key)]
		st.Holders = append(st.Holders, h)
		owners = append(owners, clientv3.OpGet(b.ownerKey(clientv3.LeaseID(kv.Lease))))
		if kv.Lease != 0 {
			leases[kv.Lease] = append(leases[kv.Lease], len(st.Holders)-1)
		}
	}
	for i := 0; i < len(owners); i += maxTxnOps {
		ops := owners[i:min(i+maxTxnOps, len(owners))]
		or, err := b.cli.Txn(rctx).Then(ops...).Commit()
		if err != nil {
			return driver.PermitState{}, b.sortErr(ctx, rctx, err)
		}
		for j, r := range or.Responses {
			if kvs := r.GetResponseRange().GetKvs(); len(kvs) == 1 {
				st.Holders[i+j].Owner = string(kvs[0].Value)
			}
		}
	}
	b.fillExpiry(rctx, st.Holders, leases)
	slices.SortFunc(st.Holders, func(x, y driver.Holder) int { return cmpUint64(x.Token, y.Token) })
	return st, nil
}

func cmpUint64(x, y uint64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// permit is a granted permit: its entry, on its own etcd lease. Its
// methods are safe for concurrent use.
type permit struct {
	b        *Backend
	key      string           // as given to AcquirePermit
	id       clientv3.LeaseID // the permit's lease
	entry    string           // its entry's key
	created  int64            // the entry's create revision
	token    uint64           // the revision of the grant's write
	slot     int              // -1 when no slot was asked for
	validity driver.Validity
	onLost   func(error)

	mu    sync.Mutex
	state leaseState
}

// slotPermit is a permit asked with driver.Semaphore.Slots.
type slotPermit struct{ *permit }

// Slot implements driver.SlotLease.
func (p slotPermit) Slot() int { return p.slot }

// permitOf returns the permit of b that dl is, or nil.
func (b *Backend) permitOf(dl driver.Lease) *permit {
	var p *permit
	switch v := dl.(type) {
	case *permit:
		p = v
	case slotPermit:
		p = v.permit
	}
	if p == nil || p.b != b {
		return nil
	}
	return p
}

// Token is the revision of the write that granted the permit.
func (p *permit) Token() uint64 { return p.token }

// Key returns the key of the semaphore the permit is of.
func (p *permit) Key() string { return p.key }

// Validity is the confirmation of the permit's lease that the grant was
// reported with.
func (p *permit) Validity() driver.Validity { return p.validity }

// Refresh renews the permit's lease with one KeepAliveOnce and checks that
// its entry is still there. The lease keeps the TTL it was granted with,
// so ttl only has to be positive.
func (p *permit) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	return p.refresh(ctx, time.Now())
}

func (p *permit) refresh(ctx context.Context, sent time.Time) (driver.Validity, error) {
	if p.ended() {
		return driver.Validity{}, fmt.Errorf("%w: etcdlock: permit of %q with token %d was released or lost", driver.ErrLockLost, p.key, p.token)
	}
	b := p.b
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	var (
		ka   *clientv3.LeaseKeepAliveResponse
		kerr error
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		ka, kerr = b.cli.KeepAliveOnce(rctx, p.id)
	}()
	g, gerr := b.cli.Get(rctx, p.entry, clientv3.WithKeysOnly())
	<-done
	switch {
	case errors.Is(kerr, rpctypes.ErrLeaseNotFound):
		cause := fmt.Errorf("etcdlock: the lease of the permit of %q with token %d ended (expired or revoked)", p.key, p.token)
		p.lose(cause)
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrLockLost, cause)
	case kerr != nil:
		return driver.Validity{}, b.sortErr(ctx, rctx, kerr)
	case gerr != nil:
		return driver.Validity{}, b.sortErr(ctx, rctx, gerr)
	case len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != p.created:
		cause := fmt.Errorf("etcdlock: the entry of the permit of %q with token %d was deleted while its lease lived", p.key, p.token)
		p.lose(cause)
		b.life.Go(func() { _ = b.revokePermit(p.id, nil) })
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrLockLost, cause)
	}
	return driver.Validity{Sent: sent, TTL: time.Duration(ka.TTL) * time.Second}, nil
}

// Release revokes the permit's lease, which deletes its entry (the next
// waiter's wake-up) and its slot. If the lease was gone, or its entry had
// been deleted (by hand) while the lease lived, it returns an error
// matching distlock.ErrLockLost. If etcd does not answer, it returns
// an error matching distlock.ErrUnavailable and the Backend goes on
// revoking the lease in the background; a later Release is answered as if
// the first one had succeeded, once etcd answers.
func (p *permit) Release(ctx context.Context) error {
	p.mu.Lock()
	st := p.state
	p.mu.Unlock()
	if st == ended {
		return fmt.Errorf("%w: etcdlock: permit of %q with token %d was already released or lost", driver.ErrLockLost, p.key, p.token)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	b := p.b
	rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
	defer cancel()
	// The entry is read before the revoke deletes it: one deleted by hand
	// (or deleted and created again) while the lease lived means that the
	// permit was lost, which the revoke alone would not tell. A failed
	// read says nothing; the revoke goes on all the same.
	var vanished bool
	if g, gerr := b.cli.Get(rctx, p.entry, clientv3.WithKeysOnly()); gerr == nil {
		vanished = len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != p.created
	}
	_, err := b.cli.Revoke(rctx, p.id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		p.mu.Lock()
		if p.state == held {
			p.state = releaseUnknown
		}
		p.mu.Unlock()
		b.life.Go(func() { _ = b.revokePermit(p.id, func() { b.forgetPermit(p) }) })
		return b.sortErr(ctx, rctx, err)
	}
	p.mu.Lock()
	prev := p.state
	p.state = ended
	p.mu.Unlock()
	b.forgetPermit(p)
	switch {
	case err == nil && vanished && prev == held:
		return fmt.Errorf("%w: etcdlock: the entry of the permit of %q with token %d was deleted while its lease lived", driver.ErrLockLost, p.key, p.token)
	case err == nil:
		return nil
	case prev == releaseUnknown:
		return nil // an earlier attempt, or its retry, revoked it
	case prev == ended:
		return fmt.Errorf("%w: etcdlock: permit of %q with token %d was lost while releasing", driver.ErrLockLost, p.key, p.token)
	}
	return fmt.Errorf("%w: etcdlock: the lease of the permit of %q with token %d was gone (expired or revoked)", driver.ErrLockLost, p.key, p.token)
}

// lose ends the permit because the service no longer holds it, and tells
// the holder, once.
func (p *permit) lose(cause error) {
	p.mu.Lock()
	if p.state == ended {
		p.mu.Unlock()
		return
	}
	p.state = ended
	p.mu.Unlock()
	p.b.forgetPermit(p)
	if p.onLost != nil {
		p.onLost(fmt.Errorf("%w: %w", driver.ErrLockLost, cause))
	}
}

// closeRevoke revokes the permit's lease as the Backend closes, and tells
// the holder.
func (p *permit) closeRevoke() error {
	b := p.b
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.requestTimeout)
	defer cancel()
	_, err := b.cli.Revoke(ctx, p.id)
	p.lose(fmt.Errorf("%w: the permit's lease was revoked", ErrClosed))
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("etcdlock: revoke lease %x: %w", int64(p.id), err)
	}
	return nil
}

func (p *permit) ended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state == ended
}

// forgetPermit drops p from the permits Close revokes.
func (b *Backend) forgetPermit(p *permit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.permits, p)
}
