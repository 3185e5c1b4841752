package zklock_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/semaphore"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

var leaseNodeName = regexp.MustCompile(`^_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-lease-[0-9]{10}$`)

// childrenOf returns the children of p, none if p does not exist.
func childrenOf(t testing.TB, admin *zk.Conn, p string) []string {
	t.Helper()
	c, _, err := admin.Children(p)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		t.Fatalf("children of %s: %v", p, err)
	}
	return c
}

// waitChildren waits until p has n children and returns them in queue
// order.
func waitChildren(t testing.TB, admin *zk.Conn, p string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := childrenOf(t, admin, p)
		if len(c) == n {
			return zklock.SortNodes(c)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has children %q after 30s, want %d", p, c, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitLeasesWatchedBy waits until b watches the children of the leases of
// the semaphore at dir: it holds the semaphore's mutex and waits for a
// permit to be given back. (The server's wchp lists data watches only.)
func waitLeasesWatchedBy(t testing.TB, b *zklock.Backend, dir string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := b.ClientChildWatches(dir + "/leases")
		if n < 0 {
			t.Skip("the zk client keeps its watches otherwise than go-zookeeper v1.0.4")
		}
		if n == 1 {
			return
		}
		if n > 1 || time.Now().After(deadline) {
			t.Fatalf("%d watches on the leases of %s, want 1", n, dir)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// permitResult is what a permit's acquire returned.
type permitResult struct {
	l   driver.Lease
	err error
}

// acquirePermit starts b's acquire of a permit of key, limit limit, and
// returns where its result will be.
func acquirePermit(ctx context.Context, b *zklock.Backend, key string, limit int) <-chan permitResult {
	got := make(chan permitResult, 1)
	go func() {
		l, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: limit}, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		got <- permitResult{l, err}
	}()
	return got
}

// granted waits for a permit's result and checks that it is a grant.
func grantedPermit(t testing.TB, got <-chan permitResult, what string) driver.Lease {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.l
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not granted within 30s", what)
	}
	return nil
}

// notYet checks that an acquire has not returned.
func notYet(t testing.TB, got <-chan permitResult, what string) {
	t.Helper()
	select {
	case r := <-got:
		t.Fatalf("%s returned (%v, %v) while every permit is held", what, r.l, r.err)
	default:
	}
}

// A permit is a lease node "_c_<uuid>-lease-<sequence>" under the key's
// path's "leases", as Curator's InterProcessSemaphoreV2 names them, with
// the owner as its data, its czxid as the token and the holder's session
// as its ephemeral owner; the mutex node under "locks" is gone once the
// permit is granted. Permits reports it with no stored limit. The
// semaphore is no lock: Holder and List show none at the key, and a lock
// of the key is granted beside the permit and reported alone.
func TestPermitLayout(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "semaphore/layout"
	b := newBackend(t, z.Servers)
	dir := b.KeyPath(key)
	l, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 2}, driver.AcquireOptions{TTL: time.Minute, Owner: "host-a:123"})
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	leases := childrenOf(t, admin, dir+"/leases")
	if len(leases) != 1 || !leaseNodeName.MatchString(leases[0]) {
		t.Fatalf("lease nodes: %q, want one _c_<uuid>-lease-<sequence>", leases)
	}
	data, st, err := admin.Get(dir + "/leases/" + leases[0])
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "host-a:123" || uint64(st.Czxid) != l.Token() || st.EphemeralOwner != b.Conn().SessionID() {
		t.Errorf("lease node: data %q, czxid %d, owner %#x; want the owner, the token %d, the session %#x", data, st.Czxid, st.EphemeralOwner, l.Token(), b.Conn().SessionID())
	}
	if locks := childrenOf(t, admin, dir+"/locks"); len(locks) != 0 {
		t.Errorf("mutex nodes after the grant: %q, want none", locks)
	}
	ps, err := b.Permits(ctx, key)
	if err != nil {
		t.Fatalf("Permits: %v", err)
	}
	if ps.Limit != driver.UnknownLimit || ps.Waiting != 0 || len(ps.Holders) != 1 {
		t.Fatalf("Permits: %+v; want an unknown limit, nobody waiting and one holder", ps)
	}
	if h := ps.Holders[0]; h.Key != key || h.Token != l.Token() || h.Owner != "host-a:123" || h.Since.IsZero() || h.HasSlot {
		t.Errorf("Permits' holder: %+v", h)
	}

	if h, ok, err := b.Holder(ctx, key); err != nil || ok {
		t.Errorf("Holder of a semaphore's key: %+v, %v, %v; want no lock", h, ok, err)
	}
	if hs, err := b.List(ctx, "semaphore/"); err != nil || len(hs) != 0 {
		t.Errorf("List with a permit held: %+v, %v; want no lock", hs, err)
	}
	lock, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "locker"})
	if err != nil {
		t.Fatalf("a lock of the semaphore's key: %v", err)
	}
	if h, ok, err := b.Holder(ctx, key); err != nil || !ok || h.Token != lock.Token() || h.Owner != "locker" {
		t.Errorf("Holder: %+v, %v, %v; want the lock %d", h, ok, err, lock.Token())
	}
	if hs, err := b.List(ctx, "semaphore/"); err != nil || len(hs) != 1 || hs[0].Token != lock.Token() {
		t.Errorf("List: %+v, %v; want the lock %d alone", hs, err, lock.Token())
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if leases := childrenOf(t, admin, dir+"/leases"); len(leases) != 0 {
		t.Errorf("lease nodes after the release: %q", leases)
	}
	if _, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 2, Slots: true}, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("a permit with slots: %v, want errors.ErrUnsupported", err)
	}
}

// A permit's token is drawn when it is granted, not when it queues: a
// lock of the semaphore's key granted while a permit waits has a smaller
// token than the permit. Curator's own waiter creates its lease node
// before it waits; this package's creates it at the grant.
func TestPermitTokenDrawnAtGrant(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "semaphore/token"
	holder, waiter, locker := newBackend(t, z.Servers), newBackend(t, z.Servers), newBackend(t, z.Servers)
	dir := holder.KeyPath(key)
	p, err := holder.AcquirePermit(ctx, key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	got := acquirePermit(ctx, waiter, key, 1)
	waitChildren(t, admin, dir+"/locks", 1)
	waitLeasesWatchedBy(t, waiter, dir)
	lock, err := locker.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire of the key's lock: %v", err)
	}
	notYet(t, got, "the waiting permit")
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	q := grantedPermit(t, got, "the waiting permit")
	if q.Token() <= lock.Token() || lock.Token() <= p.Token() {
		t.Errorf("tokens: permit %d, lock %d, then permit %d; want increasing", p.Token(), lock.Token(), q.Token())
	}
	for _, l := range []driver.Lease{q, lock} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Waiters of several processes are served in arrival order, the order of
// their mutex nodes, and only the first in line watches the leases: a
// release wakes it alone, the others each watching the mutex node before
// their own.
func TestPermitWaitersInOrder(t *testing.T) {
	const waiters = 4
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "semaphore/order"
	holder := newBackend(t, z.Servers)
	dir := holder.KeyPath(key)
	held, err := holder.AcquirePermit(ctx, key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	var (
		bs  []*zklock.Backend
		got []<-chan permitResult
	)
	for i := range waiters {
		b := newBackend(t, z.Servers)
		bs = append(bs, b)
		got = append(got, acquirePermit(ctx, b, key, 1))
		waitChildren(t, admin, dir+"/locks", i+1) // one at a time: the line is the order of bs
	}
	waitLeasesWatchedBy(t, bs[0], dir)
	for i, b := range bs[1:] {
		if n := b.ClientChildWatches(dir + "/leases"); n != 0 {
			t.Errorf("waiter %d, not first in line, watches the leases (%d watches)", i+1, n)
		}
	}
	last := held
	for i := range waiters {
		for j := i; j < waiters; j++ {
			notYet(t, got[j], "a waiter")
		}
		if err := last.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l := grantedPermit(t, got[i], "the first in line")
		if l.Token() <= last.Token() {
			t.Errorf("token %d after %d", l.Token(), last.Token())
		}
		last = l
	}
	if err := last.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter that goes leaves the line: one whose context ends deletes its
// mutex node before its acquire returns, and one whose process dies (its
// session closed) loses its node with its session, so the next in line
// moves up and is granted the next permit given back.
func TestPermitWaitersThatGoLeaveTheLine(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "semaphore/gone"
	holder := newBackend(t, z.Servers)
	dir := holder.KeyPath(key)
	held, err := holder.AcquirePermit(ctx, key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancelled := acquirePermit(cctx, newBackend(t, z.Servers), key, 1)
	waitChildren(t, admin, dir+"/locks", 1)
	dies, err := zklock.New(z.Servers, zklock.WithSessionTimeout(sessionTimeout))
	if err != nil {
		t.Fatal(err)
	}
	defer dies.Close()
	dead := acquirePermit(ctx, dies, key, 1)
	waitChildren(t, admin, dir+"/locks", 2)
	last := acquirePermit(ctx, newBackend(t, z.Servers), key, 1)
	nodes := waitChildren(t, admin, dir+"/locks", 3)

	cancel()
	r := <-cancelled
	if !errors.Is(r.err, distlock.ErrNotAcquired) || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, %v; want ErrNotAcquired and context.Canceled", r.l, r.err)
	}
	if now := zklock.SortNodes(childrenOf(t, admin, dir+"/locks")); len(now) != 2 || now[0] != nodes[1] || now[1] != nodes[2] {
		t.Fatalf("mutex nodes once the cancelled acquire returned: %q, want %q", now, nodes[1:])
	}
	dies.Close()
	if r := <-dead; !errors.Is(r.err, zklock.ErrClosed) {
		t.Fatalf("waiter whose Backend closed: %v, %v; want ErrClosed", r.l, r.err)
	}
	if now := waitChildren(t, admin, dir+"/locks", 1); now[0] != nodes[2] {
		t.Fatalf("mutex nodes once the dead waiter's session ended: %q, want %q", now, nodes[2])
	}
	notYet(t, last, "the last waiter")
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := grantedPermit(t, last, "the last waiter")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if leases, locks := childrenOf(t, admin, dir+"/leases"), childrenOf(t, admin, dir+"/locks"); len(leases) != 0 || len(locks) != 0 {
		t.Errorf("left behind: leases %q, mutex nodes %q", leases, locks)
	}
}

// heldLease reads the answer of CuratorSemaphore to an acquire: the name
// of its lease node.
func heldLease(t testing.TB, cur *curator, d time.Duration) string {
	t.Helper()
	line := cur.next(t, d)
	node, ok := strings.CutPrefix(line, "held ")
	if !ok || !leaseNodeName.MatchString(node) {
		t.Fatalf("CuratorSemaphore said %q, want held _c_<uuid>-lease-<sequence>", line)
	}
	return node
}

// semPermit is what a semaphore's Acquire returned.
type semPermit struct {
	p   *semaphore.Permit
	err error
}

func acquireSem(ctx context.Context, sem *semaphore.Semaphore) <-chan semPermit {
	got := make(chan semPermit, 1)
	go func() {
		p, err := sem.Acquire(ctx)
		got <- semPermit{p, err}
	}()
	return got
}

func grantedSem(t testing.TB, got <-chan semPermit, what string) *semaphore.Permit {
	t.Helper()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.p
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not granted within 30s", what)
	}
	return nil
}

func notYetSem(t testing.TB, got <-chan semPermit, what string) {
	t.Helper()
	select {
	case r := <-got:
		t.Fatalf("%s returned (%v) while every permit is held", what, r.err)
	default:
	}
}

// Apache Curator's InterProcessSemaphoreV2, in a JVM, and package
// semaphore's permits share one semaphore at the key's path, with the same
// limit: while Curator holds every lease, a try fails and an acquire waits
// until Curator gives one back; while distlock holds every permit,
// Curator's timed acquire times out, leaving nothing behind, and its
// acquire waits until distlock gives one back; in a line of both, each
// permit given back goes to the first in line, whichever side it is on.
// Permits (Holders) lists Curator's leases with distlock's.
func TestCuratorSemaphoreInterop(t *testing.T) {
	const limit = 2
	java, classpath := buildCurator(t)
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	newSem := func(t *testing.T) (*zklock.Backend, *semaphore.Semaphore) {
		b := newBackendTimeout(t, z.Servers, holdTimeout)
		c := newClient(t, b, distlock.WithOwner("go-service"), distlock.WithTTL(holdTimeout))
		sem, err := semaphore.New(c, "pool", limit)
		if err != nil {
			t.Fatalf("semaphore.New: %v", err)
		}
		return b, sem
	}
	b, sem := newSem(t)
	dir := b.KeyPath(sem.Key())
	cur := startJava(t, java, classpath, "CuratorSemaphore", z.ConnectString(), dir, strconv.Itoa(limit))
	leaseNode := func(t *testing.T, node string) *zk.Stat {
		t.Helper()
		_, st, err := admin.Get(dir + "/leases/" + node)
		if err != nil {
			t.Fatalf("Curator's lease node %s: %v", node, err)
		}
		if st.EphemeralOwner != cur.session {
			t.Fatalf("lease node %s owned by %#x, want Curator's session %#x", node, st.EphemeralOwner, cur.session)
		}
		return st
	}

	t.Run("curator holds", func(t *testing.T) {
		var tokens []uint64
		for range limit {
			cur.send(t, "acquire")
			tokens = append(tokens, uint64(leaseNode(t, heldLease(t, cur, time.Minute)).Czxid))
		}
		if p, err := sem.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
			if err == nil {
				p.Release(ctx)
			}
			t.Fatalf("TryAcquire while Curator holds every lease: %v, want ErrNotAcquired", err)
		}
		n, hs, err := sem.Holders(ctx)
		if err != nil || n != driver.UnknownLimit || len(hs) != limit || hs[0].Token != tokens[0] || hs[1].Token != tokens[1] {
			t.Fatalf("Holders: %d, %+v, %v; want Curator's leases %d", n, hs, err, tokens)
		}
		got := acquireSem(ctx, sem)
		waitLeasesWatchedBy(t, b, dir)
		notYetSem(t, got, "Acquire")
		cur.do(t, "release", "released")
		p := grantedSem(t, got, "Acquire once Curator gave a lease back")
		if p.Token() <= tokens[1] {
			t.Errorf("token %d after Curator's %d", p.Token(), tokens[1])
		}
		// Curator's timed acquire, with one lease each held, times out and
		// leaves nothing behind.
		cur.do(t, "try 500", "timeout")
		if leases, locks := childrenOf(t, admin, dir+"/leases"), childrenOf(t, admin, dir+"/locks"); len(leases) != limit || len(locks) != 0 {
			t.Fatalf("after Curator's timed out acquire: leases %q, mutex nodes %q; want %d leases", leases, locks, limit)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		cur.do(t, "release", "released")
	})

	t.Run("distlock holds", func(t *testing.T) {
		var ps []*semaphore.Permit
		for range limit {
			p, err := sem.Acquire(ctx)
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			ps = append(ps, p)
		}
		cur.do(t, "try 500", "timeout")
		if leases, locks := childrenOf(t, admin, dir+"/leases"), childrenOf(t, admin, dir+"/locks"); len(leases) != limit || len(locks) != 0 {
			t.Fatalf("after Curator's timed out acquire: leases %q, mutex nodes %q; want our %d", leases, locks, limit)
		}
		cur.send(t, "acquire")
		// Curator's waiter holds the mutex and has made its lease node.
		waitChildren(t, admin, dir+"/locks", 1)
		waitChildren(t, admin, dir+"/leases", limit+1)
		if line, ok := cur.said(); ok {
			t.Fatalf("CuratorSemaphore said %q while distlock holds every permit", line)
		}
		if err := ps[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		leaseNode(t, heldLease(t, cur, 30*time.Second))
		if p, err := sem.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
			if err == nil {
				p.Release(ctx)
			}
			t.Fatalf("TryAcquire while Curator and distlock hold a lease each: %v, want ErrNotAcquired", err)
		}
		if err := ps[1].Release(ctx); err != nil {
			t.Fatal(err)
		}
		cur.do(t, "release", "released")
	})

	// One line, in the order of the mutex nodes: distlock holds every
	// permit; a distlock waiter, Curator and another distlock waiter line
	// up; each permit given back goes to the first in line.
	t.Run("mixed line", func(t *testing.T) {
		var ps []*semaphore.Permit
		for range limit {
			p, err := sem.Acquire(ctx)
			if err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			ps = append(ps, p)
		}
		b1, sem1 := newSem(t)
		first := acquireSem(ctx, sem1)
		waitLeasesWatchedBy(t, b1, dir)
		cur.send(t, "acquire")
		waitChildren(t, admin, dir+"/locks", 2)
		_, sem3 := newSem(t)
		third := acquireSem(ctx, sem3)
		waitChildren(t, admin, dir+"/locks", 3)

		if err := ps[0].Release(ctx); err != nil {
			t.Fatal(err)
		}
		p1 := grantedSem(t, first, "the first in line")
		// Curator now holds the mutex, its lease node made, and waits.
		waitChildren(t, admin, dir+"/leases", limit+1)
		if line, ok := cur.said(); ok {
			t.Fatalf("CuratorSemaphore said %q while every permit is held", line)
		}
		notYetSem(t, third, "the third in line")

		if err := ps[1].Release(ctx); err != nil {
			t.Fatal(err)
		}
		st := leaseNode(t, heldLease(t, cur, 30*time.Second))
		notYetSem(t, third, "the third in line")

		if err := p1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		p3 := grantedSem(t, third, "the third in line")
		if p3.Token() <= uint64(st.Czxid) || uint64(st.Czxid) <= ps[1].Token() || p1.Token() <= ps[1].Token() {
			t.Errorf("tokens %d, %d, then %d, Curator's %d, then %d; want increasing", ps[0].Token(), ps[1].Token(), p1.Token(), st.Czxid, p3.Token())
		}
		if err := p3.Release(ctx); err != nil {
			t.Fatal(err)
		}
		cur.do(t, "release", "released")
		if leases, locks := childrenOf(t, admin, dir+"/leases"), childrenOf(t, admin, dir+"/locks"); len(leases) != 0 || len(locks) != 0 {
			t.Errorf("left behind: leases %q, mutex nodes %q", leases, locks)
		}
	})
}
