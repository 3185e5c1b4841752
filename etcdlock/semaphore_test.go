package etcdlock_test

import (
	"bufio"
	"context"
	"errors"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/testserver"
)

// slotDir is where the slots of the semaphore at key are, under prefix.
func slotDir(prefix, key string) string {
	return prefix + "%00slot/" + strings.TrimPrefix(etcdlock.LockName(prefix, key), prefix) + "/"
}

// permitOpts are the options of a permit in these tests: nobody renews
// their leases, whose TTL is long enough that none lapses in a test.
func permitOpts(wait bool) driver.AcquireOptions {
	return driver.AcquireOptions{TTL: time.Minute, Wait: wait}
}

// granted is the outcome of an AcquirePermit run in a goroutine.
type granted struct {
	l   driver.Lease
	err error
}

// permitAsync asks b for a permit in a goroutine.
func permitAsync(ctx context.Context, b *etcdlock.Backend, key string, sem driver.Semaphore) <-chan granted {
	c := make(chan granted, 1)
	go func() {
		l, err := b.AcquirePermit(ctx, key, sem, permitOpts(true))
		c <- granted{l, err}
	}()
	return c
}

// waitWaiting waits until the semaphore at key has n waiters.
func waitWaiting(t *testing.T, ctx context.Context, b *etcdlock.Backend, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := b.Permits(ctx, key)
		if err != nil {
			t.Fatalf("Permits: %v", err)
		}
		if st.Waiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Permits: %+v after 30s; want %d waiting", st, n)
		}
		time.Sleep(5 * time.Millisecond) // polls a condition, with a deadline
	}
}

// expectGrant waits for c's grant, up to d.
func expectGrant(t *testing.T, c <-chan granted, d time.Duration, what string) driver.Lease {
	t.Helper()
	select {
	case g := <-c:
		if g.err != nil {
			t.Fatalf("%s: %v", what, g.err)
		}
		return g.l
	case <-time.After(d):
		t.Fatalf("%s: not granted after %v", what, d)
	}
	return nil
}

// expectNoGrant checks that c has no grant yet.
func expectNoGrant(t *testing.T, c <-chan granted, what string) {
	t.Helper()
	select {
	case g := <-c:
		if g.err == nil {
			g.l.Release(context.Background())
		}
		t.Fatalf("%s: got %v, %v; want it still waiting", what, g.l, g.err)
	default:
	}
}

func mustReleasePermit(t *testing.T, l driver.Lease) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// assertEmpty checks that nothing of the semaphore at key is left in etcd:
// no entry, no slot.
func assertEmpty(t *testing.T, admin *clientv3.Client, key string) {
	t.Helper()
	for _, dir := range []string{permitDir(etcdlock.DefaultPrefix, key), slotDir(etcdlock.DefaultPrefix, key)} {
		if kvs := keysUnder(t, admin, strings.TrimSuffix(dir, "/")); len(kvs) != 0 {
			t.Fatalf("%d keys left under %q, first %q", len(kvs), dir, kvs[0].Key)
		}
	}
}

// TestPermitLayout: a permit is an entry under <prefix>%00sem/<name>/ named
// by its own lease, holding the limit and written twice, its token the
// second write's revision; its slot is a key under <prefix>%00slot/<name>/
// holding the entry's key; its owner is at <prefix>%00/<lease>, as a
// session's. Release deletes them all; List shows no permit as a lock.
func TestPermitLayout(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	b := newBackend(t, newClient(t, e.Endpoints))
	ctx, key := testCtx(t), "semaphore/jobs/a"
	opts := permitOpts(false)
	opts.Owner = "worker-7"
	l, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 3, Slots: true}, opts)
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	dir := permitDir(etcdlock.DefaultPrefix, key)
	if dir != "distlock/%00sem/semaphore%2Fjobs%2Fa/" {
		t.Fatalf("permitDir = %q", dir)
	}
	kvs := keysUnder(t, admin, strings.TrimSuffix(dir, "/"))
	if len(kvs) != 1 {
		t.Fatalf("%d entries; want 1", len(kvs))
	}
	kv := kvs[0]
	id := strconv.FormatInt(kv.Lease, 16)
	if string(kv.Key) != dir+id || string(kv.Value) != "3" || kv.Version != 2 || uint64(kv.ModRevision) != l.Token() {
		t.Fatalf("entry %q = %q (version %d, mod revision %d, lease %s); want %q = \"3\", version 2, mod revision the token %d",
			kv.Key, kv.Value, kv.Version, kv.ModRevision, id, dir+id, l.Token())
	}
	if sl, ok := l.(driver.SlotLease); !ok || sl.Slot() != 0 {
		t.Fatalf("lease %T: want a SlotLease of slot 0", l)
	}
	slots := keysUnder(t, admin, strings.TrimSuffix(slotDir(etcdlock.DefaultPrefix, key), "/"))
	if len(slots) != 1 || string(slots[0].Key) != "distlock/%00slot/semaphore%2Fjobs%2Fa/0" || string(slots[0].Value) != string(kv.Key) ||
		slots[0].Lease != kv.Lease || uint64(slots[0].CreateRevision) != l.Token() {
		t.Fatalf("slot keys %v; want slot 0 holding the entry's key, on its lease, created by the grant", slots)
	}
	owner, err := admin.Get(ctx, "distlock/%00/"+id)
	if err != nil || len(owner.Kvs) != 1 || string(owner.Kvs[0].Value) != "worker-7" {
		t.Fatalf("owner key: %v, %v; want worker-7", owner, err)
	}
	if hs, err := b.List(ctx, ""); err != nil || len(hs) != 0 {
		t.Fatalf("List: %v, %v; want no lock", hs, err)
	}
	st, err := b.Permits(ctx, key)
	if err != nil || st.Limit != 3 || st.Waiting != 0 || len(st.Holders) != 1 {
		t.Fatalf("Permits: %+v, %v", st, err)
	}
	if h := st.Holders[0]; h.Key != key || h.Token != l.Token() || h.Owner != "worker-7" || !h.HasSlot || h.Slot != 0 || h.Expires.IsZero() {
		t.Fatalf("Permits' holder: %+v", h)
	}
	mustReleasePermit(t, l)
	assertEmpty(t, admin, key)
	if owner, err := admin.Get(ctx, "distlock/%00/"+id); err != nil || len(owner.Kvs) != 0 {
		t.Fatalf("owner key after Release: %v, %v; want none", owner, err)
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("second Release: %v; want ErrLockLost", err)
	}
}

// TestPermitReleaseOutOfOrder: holders give permits back in any order, and
// each release admits the first waiter: with a limit of 2, the later
// holder's release admits the first waiter although the entry 2 places
// before it (the earlier holder) stays.
func TestPermitReleaseOutOfOrder(t *testing.T) {
	e := testserver.StartEtcd(t)
	cli := newClient(t, e.Endpoints)
	ctx, key := testCtx(t), "semaphore/out-of-order"
	sem := driver.Semaphore{Limit: 2}
	var holders []driver.Lease
	for range 2 {
		l, err := newBackend(t, cli).AcquirePermit(ctx, key, sem, permitOpts(false))
		if err != nil {
			t.Fatalf("AcquirePermit: %v", err)
		}
		holders = append(holders, l)
	}
	b := newBackend(t, cli)
	w1 := permitAsync(ctx, newBackend(t, cli), key, sem)
	waitWaiting(t, ctx, b, key, 1)
	w2 := permitAsync(ctx, newBackend(t, cli), key, sem)
	waitWaiting(t, ctx, b, key, 2)

	mustReleasePermit(t, holders[1])
	l1 := expectGrant(t, w1, 30*time.Second, "the first waiter, after the later holder's release")
	expectNoGrant(t, w2, "the second waiter, with 2 permits held")
	mustReleasePermit(t, holders[0])
	l2 := expectGrant(t, w2, 30*time.Second, "the second waiter, after the earlier holder's release")
	if l2.Token() <= l1.Token() || l1.Token() <= holders[1].Token() {
		t.Fatalf("tokens %d, %d, %d, %d; want the waiters' above the holders', in order", holders[0].Token(), holders[1].Token(), l1.Token(), l2.Token())
	}
	mustReleasePermit(t, l1)
	mustReleasePermit(t, l2)
}

// TestPermitFIFO: waiters in Backends of their own are granted in the
// order they came, one per release, and a waiter that gives up is passed
// over.
func TestPermitFIFO(t *testing.T) {
	const waiters = 6
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	cli := newClient(t, e.Endpoints)
	ctx, key := testCtx(t), "semaphore/fifo"
	sem := driver.Semaphore{Limit: 1}
	b := newBackend(t, cli)
	held, err := b.AcquirePermit(ctx, key, sem, permitOpts(false))
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	var chans []<-chan granted
	gaveUp := 2
	gctx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	for i := range waiters {
		actx := ctx
		if i == gaveUp {
			actx = gctx
		}
		chans = append(chans, permitAsync(actx, newBackend(t, cli), key, sem))
		waitWaiting(t, ctx, b, key, i+1)
	}
	giveUp()
	if g := <-chans[gaveUp]; !errors.Is(g.err, distlock.ErrNotAcquired) || !errors.Is(g.err, context.Canceled) {
		t.Fatalf("the waiter that gave up: %v, %v; want ErrNotAcquired and context.Canceled", g.l, g.err)
	}
	waitWaiting(t, ctx, b, key, waiters-1)
	last := held.Token()
	for i := range waiters {
		if i == gaveUp {
			continue
		}
		mustReleasePermit(t, held)
		held = expectGrant(t, chans[i], 30*time.Second, "waiter "+strconv.Itoa(i))
		for j := i + 1; j < waiters; j++ {
			if j != gaveUp {
				expectNoGrant(t, chans[j], "waiter "+strconv.Itoa(j))
			}
		}
		if held.Token() <= last {
			t.Fatalf("waiter %d's token %d after %d", i, held.Token(), last)
		}
		last = held.Token()
	}
	mustReleasePermit(t, held)
	assertEmpty(t, admin, key)
}

// TestPermitDeadWaiter: an entry whose lease nobody renews (a waiter that
// died) keeps its place in line until its lease lapses, and the waiter
// after it is then granted; while it waits, it keeps the limit stored.
func TestPermitDeadWaiter(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	cli := newClient(t, e.Endpoints)
	ctx, key := testCtx(t), "semaphore/dead"
	sem := driver.Semaphore{Limit: 1}
	b := newBackend(t, cli)
	held, err := b.AcquirePermit(ctx, key, sem, permitOpts(false))
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	g, err := admin.Grant(ctx, 2)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	dead := permitDir(etcdlock.DefaultPrefix, key) + strconv.FormatInt(int64(g.ID), 16)
	if _, err := admin.Put(ctx, dead, "1", clientv3.WithLease(g.ID)); err != nil {
		t.Fatalf("Put: %v", err)
	}
	w := permitAsync(ctx, newBackend(t, cli), key, sem)
	waitWaiting(t, ctx, b, key, 2)
	mustReleasePermit(t, held)
	if _, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 2}, permitOpts(false)); !errors.As(err, new(*driver.LimitError)) {
		t.Fatalf("AcquirePermit with limit 2 while waiters of limit 1 wait: %v; want a *driver.LimitError", err)
	}
	l := expectGrant(t, w, 30*time.Second, "the waiter after the dead one")
	if kvs := keysUnder(t, admin, strings.TrimSuffix(permitDir(etcdlock.DefaultPrefix, key), "/")); len(kvs) != 1 {
		t.Fatalf("%d entries; want the granted one alone (the dead one lapsed)", len(kvs))
	}
	mustReleasePermit(t, l)
	assertEmpty(t, admin, key)
}

// TestPermitLimitRace: askers naming limits 1 and 2 come at once to an
// empty semaphore, again and again: the permits live at once always name
// one limit, the others are refused with a *driver.LimitError, and nothing
// is left behind.
func TestPermitLimitRace(t *testing.T) {
	const rounds, askers = 20, 6
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	cli := newClient(t, e.Endpoints)
	ctx, key := testCtx(t), "semaphore/limit-race"
	bs := make([]*etcdlock.Backend, askers)
	for i := range bs {
		bs[i] = newBackend(t, cli)
	}
	for round := range rounds {
		var wg sync.WaitGroup
		var mu sync.Mutex
		grants := map[int][]driver.Lease{}
		for i := range askers {
			limit := 1 + i%2
			wg.Go(func() {
				l, err := bs[i].AcquirePermit(ctx, key, driver.Semaphore{Limit: limit}, permitOpts(false))
				var le *driver.LimitError
				switch {
				case err == nil:
					mu.Lock()
					grants[limit] = append(grants[limit], l)
					mu.Unlock()
				case errors.As(err, &le):
					if le.Asked != limit || le.Stored != 3-limit {
						t.Errorf("round %d: %v; want Stored %d, Asked %d", round, err, 3-limit, limit)
					}
				case !errors.Is(err, distlock.ErrNotAcquired):
					t.Errorf("round %d: AcquirePermit: %v", round, err)
				}
			})
		}
		wg.Wait()
		if len(grants) != 1 || len(grants[1]) > 1 || len(grants[2]) > 2 {
			t.Fatalf("round %d: %d permits of limit 1 and %d of limit 2 live at once", round, len(grants[1]), len(grants[2]))
		}
		for _, ls := range grants {
			for _, l := range ls {
				mustReleasePermit(t, l)
			}
		}
		assertEmpty(t, admin, key)
	}
}

// TestPermitCancelledAtRandom: acquires with slots cancelled at random
// moments (up to 150ms, so that some are granted, some as they leave)
// while permits come and go leave no entry, slot or owner key behind.
func TestPermitCancelledAtRandom(t *testing.T) {
	const acquires, backends = 200, 4
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	cli := newClient(t, e.Endpoints)
	ctx, key := testCtx(t), "semaphore/cancelled"
	sem := driver.Semaphore{Limit: 2, Slots: true}
	bs := make([]*etcdlock.Backend, backends)
	for i := range bs {
		bs[i] = newBackend(t, cli)
	}
	var wg sync.WaitGroup
	var n atomic.Int32
	for i := range acquires {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond) // spreads the load: it bears on no outcome
			actx, cancel := context.WithTimeout(ctx, time.Duration(mrand.IntN(150))*time.Millisecond)
			defer cancel()
			opts := permitOpts(true)
			opts.Owner = "cancelled"
			l, err := bs[i%backends].AcquirePermit(actx, key, sem, opts)
			if err != nil {
				if !errors.Is(err, distlock.ErrNotAcquired) {
					t.Errorf("AcquirePermit: %v; want ErrNotAcquired", err)
				}
				return
			}
			n.Add(1)
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
	}
	wg.Wait()
	t.Logf("%d of %d acquires granted", n.Load(), acquires)
	assertEmpty(t, admin, key)
	resp, err := admin.Get(ctx, "distlock/%00/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("owner keys left: %v, %v", resp, err)
	}
}

// TestPermitBesideLock: a lock of the semaphore's key neither counts
// against the limit nor excludes permits, and a permit granted after the
// lock has a greater token.
func TestPermitBesideLock(t *testing.T) {
	e := testserver.StartEtcd(t)
	cli := newClient(t, e.Endpoints)
	b := newBackend(t, cli)
	ctx, key := testCtx(t), "semaphore/beside"
	lock, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: suiteTTL})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	p, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 1}, permitOpts(false))
	if err != nil {
		t.Fatalf("AcquirePermit beside a lock: %v", err)
	}
	if p.Token() <= lock.Token() {
		t.Fatalf("permit token %d after the lock's %d", p.Token(), lock.Token())
	}
	if h, ok, err := b.Holder(ctx, key); err != nil || !ok || h.Token != lock.Token() {
		t.Fatalf("Holder: %+v, %v, %v; want the lock", h, ok, err)
	}
	mustReleasePermit(t, p)
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TestClosePermits: Close revokes the leases of the Backend's permits,
// telling their holders, and ends its waiting acquires with ErrClosed,
// leaving nothing behind.
func TestClosePermits(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	cli := newClient(t, e.Endpoints)
	ctx, key := testCtx(t), "semaphore/close"
	sem := driver.Semaphore{Limit: 1}
	b, err := etcdlock.New(cli)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	lost := make(chan error, 1)
	opts := permitOpts(false)
	opts.OnLost = func(err error) { lost <- err }
	if _, err := b.AcquirePermit(ctx, key, sem, opts); err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	w := permitAsync(ctx, b, key, sem)
	waitWaiting(t, ctx, newBackend(t, cli), key, 1)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-lost:
		if !errors.Is(err, distlock.ErrLockLost) || !errors.Is(err, etcdlock.ErrClosed) {
			t.Fatalf("OnLost: %v; want ErrLockLost and ErrClosed", err)
		}
	default:
		t.Fatalf("OnLost not called by Close")
	}
	if g := <-w; !errors.Is(g.err, etcdlock.ErrClosed) {
		t.Fatalf("the waiter: %v, %v; want ErrClosed", g.l, g.err)
	}
	assertEmpty(t, admin, key)
}

// TestClosePermitsOwnClient: Close of a Backend that owns its client
// (OpenURL's) revokes the leases of its waiting acquires before it closes
// the client: once Close returns, no waiter's entry is left in etcd to
// queue the others behind it until its TTL.
func TestClosePermitsOwnClient(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ctx, key := testCtx(t), "semaphore/close-own-client"
	sem := driver.Semaphore{Limit: 1}
	held, err := newBackend(t, newClient(t, e.Endpoints)).AcquirePermit(ctx, key, sem, permitOpts(false))
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	b, err := etcdlock.OpenURL(ctx, "etcd://"+strings.TrimPrefix(e.Endpoints[0], "http://"))
	if err != nil {
		t.Fatalf("OpenURL: %v", err)
	}
	const n = 12
	waiters := make([]<-chan granted, n)
	for i := range waiters {
		waiters[i] = permitAsync(ctx, b, key, sem)
	}
	waitWaiting(t, ctx, newBackend(t, newClient(t, e.Endpoints)), key, n)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close has returned: the waiters' entries must be gone already.
	if kvs := keysUnder(t, admin, strings.TrimSuffix(permitDir(etcdlock.DefaultPrefix, key), "/")); len(kvs) != 1 {
		t.Fatalf("%d entries after Close; want only the permit held elsewhere", len(kvs))
	}
	for i, w := range waiters {
		if g := <-w; !errors.Is(g.err, etcdlock.ErrClosed) {
			t.Fatalf("waiter %d: %v, %v; want ErrClosed", i, g.l, g.err)
		}
	}
	mustReleasePermit(t, held)
	assertEmpty(t, admin, key)
}

// TestPermitReleaseAfterEntryDeleted: Release of a permit whose entry was
// deleted by hand while its lease lived, or deleted and written again,
// still revokes the lease (its slot goes with it) and reports the permit
// lost rather than released.
func TestPermitReleaseAfterEntryDeleted(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	b := newBackend(t, newClient(t, e.Endpoints))
	ctx := testCtx(t)
	sem := driver.Semaphore{Limit: 2, Slots: true}
	for _, rewrite := range []bool{false, true} {
		key := "semaphore/deleted-" + strconv.FormatBool(rewrite)
		l, err := b.AcquirePermit(ctx, key, sem, permitOpts(false))
		if err != nil {
			t.Fatalf("AcquirePermit: %v", err)
		}
		kvs := keysUnder(t, admin, strings.TrimSuffix(permitDir(etcdlock.DefaultPrefix, key), "/"))
		if len(kvs) != 1 {
			t.Fatalf("%d entries; want 1", len(kvs))
		}
		entry := string(kvs[0].Key)
		if _, err := admin.Delete(ctx, entry); err != nil {
			t.Fatal(err)
		}
		if rewrite {
			if _, err := admin.Put(ctx, entry, "2"); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
			t.Fatalf("rewrite %v: Release: %v; want ErrLockLost", rewrite, err)
		}
		if rewrite {
			if _, err := admin.Delete(ctx, entry); err != nil {
				t.Fatal(err)
			}
		}
		assertEmpty(t, admin, key) // the slot went with the lease
	}
}

// txnsStarted reads etcd's count of the transactions it was sent.
func txnsStarted(t *testing.T, e *testserver.Etcd) int {
	t.Helper()
	resp, err := http.Get(e.Members[0].ClientURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), `grpc_server_started_total{grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} `); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(f)
		}
	}
	t.Fatal("no count of transactions in etcd's metrics")
	return 0
}

// TestPermitReleaseWakesOne: a permit given back wakes the first waiter
// alone, whose grant wakes the next: handing a permit down a line of n
// waiters, one release at a time, costs etcd a few transactions per
// hand-off (the first waiter's read and claim, the next one's read, and a
// read again where a write came just before a watch), not a read by every
// waiter at every release (n(n+1)/2 in all).
func TestPermitReleaseWakesOne(t *testing.T) {
	const waiters = 12
	e := testserver.StartEtcd(t)
	cli := newClient(t, e.Endpoints)
	ctx, key := testCtx(t), "semaphore/wakes-one"
	sem := driver.Semaphore{Limit: 1}
	b := newBackend(t, cli)
	held, err := b.AcquirePermit(ctx, key, sem, permitOpts(false))
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	watchers := watcherCount(t, e)
	var chans []<-chan granted
	for i := range waiters {
		chans = append(chans, permitAsync(ctx, newBackend(t, cli), key, sem))
		waitWaiting(t, ctx, b, key, i+1)
	}
	// Every waiter has its one watch: none is reading any more.
	for deadline := time.Now().Add(30 * time.Second); watcherCount(t, e) != watchers+waiters; {
		if time.Now().After(deadline) {
			t.Fatalf("%d watchers after 30s; want %d, one per waiter", watcherCount(t, e), watchers+waiters)
		}
		time.Sleep(5 * time.Millisecond) // polls a condition, with a deadline
	}
	before := txnsStarted(t, e)
	for i := range waiters {
		mustReleasePermit(t, held)
		held = expectGrant(t, chans[i], 30*time.Second, "waiter "+strconv.Itoa(i))
	}
	n := txnsStarted(t, e) - before
	t.Logf("%d transactions for %d hand-offs", n, waiters)
	if n > 4*waiters {
		t.Fatalf("%d transactions for %d hand-offs; want at most %d", n, waiters, 4*waiters)
	}
	mustReleasePermit(t, held)
}
