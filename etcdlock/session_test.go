package etcdlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/testserver"
)

type acquired struct {
	l   driver.Lease
	err error
}

// The class of bug where a Mutex reports success to a waiter whose session
// has ended while it waited: the waiter believes it holds a lock that
// nobody keeps alive (or that etcd already dropped).
func TestWaiterWhoseSessionEndsGetsAnError(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	const ttl = 5 * time.Second
	opts := driver.AcquireOptions{TTL: ttl, Wait: true}

	t.Run("Baseline/MutexGrantsOnEndedSession", func(t *testing.T) {
		ctx := testCtx(t)
		name := "baseline-11456"
		hs, err := concurrency.NewSession(newClient(t, e.Endpoints), concurrency.WithTTL(5))
		if err != nil {
			t.Fatal(err)
		}
		defer hs.Close()
		hm := concurrency.NewMutex(hs, name)
		if err := hm.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		ws, err := concurrency.NewSession(newClient(t, e.Endpoints), concurrency.WithTTL(5))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Revoke(context.Background(), ws.Lease())
		wm := concurrency.NewMutex(ws, name)
		errc := make(chan error, 1)
		go func() { errc <- wm.Lock(ctx) }()
		waitKeys(t, admin, name, 2)
		ws.Orphan() // the session is over: Done is closed, nobody keeps its lease alive
		if err := hm.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("the fault did not bite: Mutex.Lock on an ended session failed: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Mutex.Lock did not return")
		}
		if !isClosed(ws.Done()) {
			t.Fatal("session Done not closed after Orphan")
		}
		t.Logf("baseline: Mutex.Lock granted %s to a session whose Done() had closed", wm.Key())
	})

	// queue makes bh hold key and bw wait for it in etcd, and returns the
	// holder's lease, the waiter's result channel and the waiter's key.
	queue := func(t *testing.T, key string) (*etcdlock.Backend, driver.Lease, <-chan acquired, string) {
		ctx := testCtx(t)
		bh := newBackend(t, newClient(t, e.Endpoints))
		bw := newBackend(t, newClient(t, e.Endpoints))
		lh, err := bh.Acquire(ctx, key, opts)
		if err != nil {
			t.Fatal(err)
		}
		res := make(chan acquired, 1)
		go func() {
			l, err := bw.Acquire(ctx, key, opts)
			res <- acquired{l, err}
		}()
		kvs := waitKeys(t, admin, etcdlock.LockName(etcdlock.DefaultPrefix, key), 2)
		return bw, lh, res, string(kvs[1].Key)
	}
	check := func(t *testing.T, res <-chan acquired, bw *etcdlock.Backend, key string) {
		t.Helper()
		select {
		case r := <-res:
			if r.err == nil {
				r.l.Release(context.Background())
				t.Fatalf("the waiter got the lock (token %d) after its session ended", r.l.Token())
			}
			if !errors.Is(r.err, distlock.ErrUnavailable) || !errors.Is(r.err, etcdlock.ErrSessionLost) {
				t.Errorf("waiter's error: %v; want ErrUnavailable and ErrSessionLost", r.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the waiter's Acquire did not return")
		}
		if kvs := keysUnder(t, admin, etcdlock.LockName(etcdlock.DefaultPrefix, key)); len(kvs) != 0 {
			t.Errorf("%d keys left under the lock name", len(kvs))
		}
		// The Backend goes on with a new session.
		l, err := bw.Acquire(testCtx(t), key, opts)
		if err != nil {
			t.Fatalf("acquire after the session ended: %v", err)
		}
		if err := l.Release(context.Background()); err != nil {
			t.Error(err)
		}
	}

	t.Run("Revoked", func(t *testing.T) {
		key := "revoked-while-queued"
		bw, lh, res, wkey := queue(t, key)
		kvs := keysUnder(t, admin, etcdlock.LockName(etcdlock.DefaultPrefix, key))
		if string(kvs[1].Key) != wkey {
			t.Fatal("waiter key moved")
		}
		if _, err := admin.Revoke(context.Background(), clientv3.LeaseID(kvs[1].Lease)); err != nil {
			t.Fatal(err)
		}
		// The holder goes: a Mutex that missed the revocation would now
		// hand the lock to the waiter.
		if err := lh.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		check(t, res, bw, key)
	})

	t.Run("KeepAliveGaveUp", func(t *testing.T) {
		key := "keepalive-gave-up"
		bw, lh, res, _ := queue(t, key)
		if !etcdlock.OrphanSession(bw, ttl) {
			t.Fatal("no session to orphan")
		}
		if err := lh.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		check(t, res, bw, key)
	})
}

// Two acquires of one key through one Backend must not share the etcd key.
func TestSameBackendSameKey(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)

	t.Run("Baseline/TwoMutexesOfOneSession", func(t *testing.T) {
		s, err := concurrency.NewSession(newClient(t, e.Endpoints), concurrency.WithTTL(5))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		m1, m2 := concurrency.NewMutex(s, "baseline-shared"), concurrency.NewMutex(s, "baseline-shared")
		if err := m1.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := m2.Lock(lctx); err != nil {
			t.Fatalf("the fault did not bite: the second Mutex of the session waited: %v", err)
		}
		if m1.Key() != m2.Key() {
			t.Fatalf("keys %q and %q differ", m1.Key(), m2.Key())
		}
		t.Logf("baseline: two Mutexes of one session both hold %s", m1.Key())
	})

	t.Run("SecondWaits", func(t *testing.T) {
		key := "shared-backend"
		b := newBackend(t, newClient(t, e.Endpoints))
		c1, c2 := newLockClient(t, b), newLockClient(t, b) // e.g. two libraries of one process
		l1, err := c1.Acquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *distlock.Lock, 1)
		go func() {
			l, err := c2.Acquire(ctx, key)
			if err != nil {
				t.Errorf("second Acquire: %v", err)
			}
			got <- l
		}()
		select {
		case l := <-got:
			t.Fatalf("second acquire through the same backend got the key while it was held (token %d)", l.Token())
		case <-time.After(300 * time.Millisecond):
		}
		if kvs := keysUnder(t, admin, etcdlock.LockName(etcdlock.DefaultPrefix, key)); len(kvs) != 1 {
			t.Errorf("%d keys in etcd; the second acquire should wait in this process", len(kvs))
		}
		if _, err := c2.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("TryAcquire through the same backend: %v, want ErrNotAcquired", err)
		}
		if err := l1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case l2 := <-got:
			if l2 == nil {
				return
			}
			if l2.Token() <= l1.Token() {
				t.Errorf("token %d after %d", l2.Token(), l1.Token())
			}
			if err := l2.Release(ctx); err != nil {
				t.Error(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("second acquire not served after the release")
		}
	})

	t.Run("ManyGoroutines", func(t *testing.T) {
		key := "shared-backend-many"
		b := newBackend(t, newClient(t, e.Endpoints))
		other := newBackend(t, newClient(t, e.Endpoints))
		clients := []*distlock.Client{newLockClient(t, b), newLockClient(t, b), newLockClient(t, other)}
		var s section
		var wg sync.WaitGroup
		for i := range 12 {
			c := clients[i%len(clients)]
			wg.Go(func() {
				for range 5 {
					l, err := c.Acquire(ctx, key)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					s.enter(t, l)
					time.Sleep(time.Millisecond) // widen the section
					s.leave(t, l)
					if err := l.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			})
		}
		wg.Wait()
		s.checkIncreasing(t)
		if len(s.tokens) != 60 {
			t.Errorf("%d grants, want 60", len(s.tokens))
		}
	})
}

// An acquire that gives up deletes the key it queued with.
func TestGivingUpLeavesNoKey(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)
	key := "give-up"
	bh := newBackend(t, newClient(t, e.Endpoints))
	bw := newBackend(t, newClient(t, e.Endpoints))
	name := etcdlock.LockName(etcdlock.DefaultPrefix, key)
	lh, err := bh.Acquire(ctx, key, driver.AcquireOptions{TTL: 5 * time.Second, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	holderKey := string(keysUnder(t, admin, name)[0].Key)
	onlyHolder := func(what string) {
		t.Helper()
		kvs := keysUnder(t, admin, name)
		if len(kvs) != 1 || string(kvs[0].Key) != holderKey {
			var ks []string
			for _, kv := range kvs {
				ks = append(ks, string(kv.Key))
			}
			t.Errorf("after %s: keys %q, want only the holder's %q", what, ks, holderKey)
		}
	}

	// Cancelled while queued in etcd.
	wctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := bw.Acquire(wctx, key, driver.AcquireOptions{TTL: 5 * time.Second, Wait: true})
		errc <- err
	}()
	waitKeys(t, admin, name, 2)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Acquire: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cancelled Acquire did not return")
	}
	onlyHolder("a cancelled acquire")

	// A deadline, through a Client.
	c := newLockClient(t, bw)
	dctx, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	if _, err := c.Acquire(dctx, key); !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire past its deadline: %v", err)
	}
	onlyHolder("an acquire past its deadline")

	// A single try.
	if _, err := c.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("TryAcquire of a held key: %v", err)
	}
	onlyHolder("a failed try")

	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if kvs := keysUnder(t, admin, name); len(kvs) != 0 {
		t.Errorf("%d keys left after the release", len(kvs))
	}
}

// Locks of one TTL share one session; a lost session loses all of them,
// and the Backend then starts a new one.
func TestSessions(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	c := newLockClient(t, b, distlock.WithTTL(3*time.Second))
	leaseOf := func(key string) int64 {
		return keysUnder(t, admin, etcdlock.LockName(etcdlock.DefaultPrefix, key))[0].Lease
	}

	l1, err := c.Acquire(ctx, "s/1")
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(ctx, "s/2")
	if err != nil {
		t.Fatal(err)
	}
	l3, err := c.Acquire(ctx, "s/3", distlock.WithTTL(7*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if leaseOf("s/1") != leaseOf("s/2") {
		t.Errorf("two locks of one TTL use leases %x and %x, want one session", leaseOf("s/1"), leaseOf("s/2"))
	}
	if leaseOf("s/1") == leaseOf("s/3") {
		t.Errorf("locks of TTLs 3s and 7s share lease %x", leaseOf("s/1"))
	}
	old := leaseOf("s/1")
	if _, err := admin.Revoke(ctx, clientv3.LeaseID(old)); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*distlock.Lock{l1, l2} {
		waitClosed(t, l.Done(), 30*time.Second, "lock of the revoked session")
		if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) {
			t.Errorf("Err() = %v, want ErrLockLost", err)
		}
		if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
			t.Errorf("Release of a lost lock: %v, want ErrLockLost", err)
		}
	}
	if err := l3.Err(); err != nil {
		t.Errorf("lock of another session ended: %v", err)
	}
	l4, err := c.Acquire(ctx, "s/1")
	if err != nil {
		t.Fatal(err)
	}
	if leaseOf("s/1") == old {
		t.Errorf("acquire after the loss reused the revoked lease")
	}
	if l4.Token() <= l1.Token() {
		t.Errorf("token %d after %d", l4.Token(), l1.Token())
	}
	l4.Release(ctx)
	l3.Release(ctx)
}

// Validity reports what etcd confirmed: whole seconds, rounded up, and a
// confirmation sent after a refresh began.
func TestValidity(t *testing.T) {
	e := testserver.StartEtcd(t)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	for _, tc := range []struct{ ask, want time.Duration }{
		{1500 * time.Millisecond, 2 * time.Second},
		{3 * time.Second, 3 * time.Second},
		// The test servers' minimum lease TTL is 1s.
		{300 * time.Millisecond, time.Second},
	} {
		before := time.Now()
		l, err := b.Acquire(ctx, "validity/"+tc.ask.String(), driver.AcquireOptions{TTL: tc.ask})
		if err != nil {
			t.Fatal(err)
		}
		v := l.Validity()
		if v.TTL != tc.want {
			t.Errorf("TTL %v: validity TTL %v, want %v", tc.ask, v.TTL, tc.want)
		}
		if !v.Sent.Before(time.Now()) || time.Since(v.Sent) > v.TTL/4+time.Second || v.Sent.Before(before.Add(-v.TTL)) {
			t.Errorf("TTL %v: validity sent at %v, acquire began at %v", tc.ask, v.Sent, before)
		}
		start := time.Now()
		r, err := l.Refresh(ctx, tc.ask)
		if err != nil {
			t.Fatal(err)
		}
		if r.Sent.Before(start) || r.TTL != tc.want {
			t.Errorf("Refresh: %+v; want sent after %v and TTL %v", r, start, tc.want)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Refresh(ctx, tc.ask); !errors.Is(err, distlock.ErrLockLost) {
			t.Errorf("Refresh after Release: %v, want ErrLockLost", err)
		}
	}

	// A batch confirms each session once.
	var ls []driver.Lease
	for _, k := range []string{"batch/1", "batch/2", "batch/3"} {
		l, err := b.Acquire(ctx, k, driver.AcquireOptions{TTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	start := time.Now()
	res := b.RefreshAll(ctx, ls, 3*time.Second)
	for i, r := range res {
		if r.Err != nil || r.Validity != res[0].Validity || r.Validity.Sent.Before(start) {
			t.Errorf("result %d: %+v (first %+v)", i, r, res[0])
		}
	}
	for _, l := range ls {
		l.Release(ctx)
	}
}

// A lock key deleted by someone else (an operator) is noticed at the next
// refresh, even though the session lives.
func TestRefreshNoticesDeletedKey(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	lost := make(chan error, 1)
	l, err := b.Acquire(ctx, "deleted", driver.AcquireOptions{TTL: 3 * time.Second, OnLost: func(err error) { lost <- err }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Delete(ctx, etcdlock.LockName(etcdlock.DefaultPrefix, "deleted")+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Refresh(ctx, 3*time.Second); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Refresh after the key was deleted: %v, want ErrLockLost", err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, distlock.ErrLockLost) {
			t.Errorf("OnLost(%v), want ErrLockLost", err)
		}
	default:
		t.Error("OnLost not called")
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release: %v, want ErrLockLost", err)
	}
}

// A release whose key someone else deleted says the lock was lost, and
// leaves the key created afterwards by the next holder (another Backend).
func TestReleaseOfDeletedKeyIsLost(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)
	ba := newBackend(t, newClient(t, e.Endpoints))
	bb := newBackend(t, newClient(t, e.Endpoints))
	opts := driver.AcquireOptions{TTL: 3 * time.Second, Wait: true}
	la, err := ba.Acquire(ctx, "deleted-release", opts)
	if err != nil {
		t.Fatal(err)
	}
	name := etcdlock.LockName(etcdlock.DefaultPrefix, "deleted-release")
	if _, err := admin.Delete(ctx, name+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	lb, err := bb.Acquire(ctx, "deleted-release", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release after the key was deleted: %v, want ErrLockLost", err)
	}
	if kvs := keysUnder(t, admin, name); len(kvs) != 1 || uint64(kvs[0].CreateRevision) != lb.Token() {
		t.Errorf("after A's release, %q has keys %v, want B's alone (token %d)", name, kvs, lb.Token())
	}
	if err := lb.Release(ctx); err != nil {
		t.Error(err)
	}
}

// Bad input gets a clear error, and a closed Backend refuses work.
func TestBadInput(t *testing.T) {
	e := testserver.StartEtcd(t)
	cli := newClient(t, e.Endpoints)
	ctx := testCtx(t)
	for name, opts := range map[string][]etcdlock.Option{
		"empty prefix":    {etcdlock.WithPrefix("")},
		"invalid prefix":  {etcdlock.WithPrefix("a\xff")},
		"zero timeout":    {etcdlock.WithRequestTimeout(0)},
		"negative timout": {etcdlock.WithRequestTimeout(-time.Second)},
	} {
		if _, err := etcdlock.New(cli, opts...); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("New(%s): %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := etcdlock.New(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("New(nil): %v, want ErrInvalidOption", err)
	}
	b := newBackend(t, cli)
	for _, ttl := range []time.Duration{0, -1, distlock.MaxTTL + time.Second} {
		if _, err := b.Acquire(ctx, "k", driver.AcquireOptions{TTL: ttl}); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("Acquire with TTL %v: %v, want ErrInvalidOption", ttl, err)
		}
	}
	l, err := b.Acquire(ctx, "k", driver.AcquireOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Refresh(ctx, 0); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Refresh with TTL 0: %v, want ErrInvalidOption", err)
	}
	if _, err := etcdlock.NewFence(b).Cmp(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Cmp(nil): %v, want ErrInvalidOption", err)
	}
	if _, err := etcdlock.NewFence(b).Txn(ctx, (*distlock.Lock)(nil)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Txn of a nil *Lock: %v, want ErrInvalidOption", err)
	}
	if _, err := etcdlock.NewFence(nil).Txn(ctx, l.(etcdlock.Held)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Txn of a Fence of a nil Backend: %v, want ErrInvalidOption", err)
	}
	foreign := newBackend(t, cli)
	if res := foreign.RefreshAll(ctx, []driver.Lease{l, nil}, time.Second); !errors.Is(res[0].Err, distlock.ErrInvalidOption) || !errors.Is(res[1].Err, distlock.ErrInvalidOption) {
		t.Errorf("RefreshAll of another backend's lease and nil: %+v", res)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := b.Acquire(ctx, "k", driver.AcquireOptions{TTL: 2 * time.Second}); !errors.Is(err, etcdlock.ErrClosed) || !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want etcdlock.ErrClosed matching distlock.ErrClosed", err)
	}
	if n := etcdlock.Queued(b); n != 0 {
		t.Errorf("%d lock names still queued after Close", n)
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release after Close: %v, want ErrLockLost (Close revoked the session)", err)
	}
	if _, err := b.List(ctx, ""); !errors.Is(err, etcdlock.ErrClosed) {
		t.Errorf("List after Close: %v, want ErrClosed", err)
	}
	// The user's client stays open.
	if _, err := cli.Get(ctx, "k"); err != nil {
		t.Errorf("client unusable after the Backend's Close: %v", err)
	}
}

// Acquirers of a key through one Backend are granted it in arrival order,
// and no lock name stays queued once they are done.
func TestFIFOWithinBackend(t *testing.T) {
	e := testserver.StartEtcd(t)
	ctx := testCtx(t)
	b := newBackend(t, newClient(t, e.Endpoints))
	opts := driver.AcquireOptions{TTL: 5 * time.Second, Wait: true}
	holder, err := b.Acquire(ctx, "fifo", opts)
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	granted := make(chan int, n)
	leases := make([]driver.Lease, n)
	for i := range n {
		go func() {
			l, err := b.Acquire(ctx, "fifo", opts)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			leases[i] = l
			granted <- i
		}()
		for etcdlock.Waiting(b, "fifo") != i+1 {
			if ctx.Err() != nil {
				t.Fatalf("waiter %d did not queue", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range n {
		select {
		case i := <-granted:
			if i != want {
				t.Fatalf("granted to waiter %d, want %d", i, want)
			}
			if err := leases[i].Release(ctx); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("waiter %d never granted", want)
		}
	}
	if n := etcdlock.Queued(b); n != 0 {
		t.Errorf("%d lock names still queued", n)
	}
}
