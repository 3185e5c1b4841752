package zklock_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

// cutOffSession is the session timeout of the clients of the server that
// the tests cut off from its leader: well below what that server goes on
// serving for without its leader (syncLimit × tickTime, cutOffSyncLimit
// ticks of 200ms: 20s), so that the leader expires the session while the
// cut-off server still answers, and the tests can look at what the
// client did while it does; and long enough that a loaded machine does
// not expire it for no fault (shortSession).
const (
	cutOffSession   = shortSession
	cutOffSyncLimit = 100
)

// A server cut off from its leader (a partition between servers, found by
// the nemesis mode of torture with seed 1796501929713515433) goes on
// answering its clients from its own state, pings included, while the
// leader, which no longer hears of their sessions, expires them and
// deletes their nodes. Such a server's answers must not grant a lock, nor
// renew one, that the leader gave to another: each test first sees the
// fault bite (the cut-off server still shows the node the leader
// deleted, and the next in line holds the lock), then that the Backend
// did not take the stale answer, though it asked (a sync on the wire),
// and that the cut-off server still answered meanwhile.
func TestFollowerCutOffFromLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-server ensemble")
	}
	var mu sync.Mutex
	links := map[int][]*faultproxy.Proxy{} // every proxy of a member's links, both ways
	z := testserver.StartZooKeeperEnsemble(t, 3, testserver.WithPeerAddress(func(from, to int, addr string) (string, error) {
		p, err := faultproxy.New(addr)
		if err != nil {
			return "", err
		}
		t.Cleanup(p.Close)
		mu.Lock()
		defer mu.Unlock()
		links[from] = append(links[from], p)
		links[to] = append(links[to], p)
		return p.Addr(), nil
	}), testserver.WithSyncLimit(cutOffSyncLimit))
	// cut cuts m off from its peers until the test ends.
	cut := func(t *testing.T, m *testserver.ZooKeeperMember) {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range links[m.ID] {
			p.Blackhole()
		}
		t.Cleanup(func() {
			mu.Lock()
			healNow(links[m.ID])
			mu.Unlock()
			z.WaitReady(t)
		})
	}
	// members returns the leader and a follower, once every member serves.
	members := func(t *testing.T) (leader, follower *testserver.ZooKeeperMember) {
		z.WaitReady(t)
		leader = z.Leader(t)
		for _, m := range z.Members {
			if m != leader {
				return leader, m
			}
		}
		t.Fatal("no follower")
		return nil, nil
	}
	// expired waits until the leader no longer has any node of key: it
	// expired the session of the follower's client, and deleted its node.
	expired := func(t *testing.T, leader *zk.Conn, dir string) {
		waitFor(t, "the leader to expire the session of the cut-off server's client", func() bool {
			c, _, err := leader.Children(dir)
			return err == nil && len(c) == 0
		})
	}
	// stale checks that the fault bites: the cut-off server still shows
	// node, which the leader deleted.
	stale := func(t *testing.T, follower *zk.Conn, dir, node string) {
		t.Helper()
		c, _, err := follower.Children(dir)
		if err != nil || !slices.Contains(c, node) {
			t.Fatalf("the cut-off server does not show the node the leader deleted (%v, %v): the fault did not bite", c, err)
		}
	}
	// synced checks that c asked the leader (through p, c's proxy to the
	// cut-off server) rather than taking the stale answer without asking.
	synced := func(t *testing.T, p *countingProxy) {
		t.Helper()
		if n := p.take()["sync"]; n == 0 {
			t.Fatalf("c sent no sync to the cut-off server")
		}
	}

	t.Run("grant", func(t *testing.T) {
		const key = "cut-off-grant"
		leader, follower := members(t)
		ctx := testCtx(t)
		onLeader := adminConn(t, []string{leader.Addr})
		onFollower := adminConn(t, []string{follower.Addr})
		a := newBackend(t, []string{leader.Addr})
		p := startCountingProxy(t, follower.Addr)
		c := newBackendTimeout(t, []string{p.addr()}, cutOffSession, zklock.WithRequestTimeout(time.Second))
		d := newBackend(t, []string{leader.Addr})
		dir := c.KeyPath(key)
		held, err := a.Acquire(ctx, key, driver.AcquireOptions{TTL: sessionTimeout})
		if err != nil {
			t.Fatalf("a: Acquire: %v", err)
		}
		listed, gate := make(chan string, 1), make(chan struct{})
		var open sync.Once
		release := func() { open.Do(func() { close(gate) }) }
		t.Cleanup(release) // a test that fails on the way does not leave c's acquire in the hook
		var once sync.Once
		c.SetBeforeWatch(func(pred string) {
			once.Do(func() {
				listed <- pred
				<-gate
			})
		})
		type result struct {
			l   driver.Lease
			err error
		}
		got := make(chan result, 1)
		go func() {
			l, err := c.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Second, Wait: true})
			got <- result{l, err}
		}()
		var waiting string
		select {
		case <-listed:
			nodes := waitNodes(t, onLeader, key, 2)
			waiting = nodes[1]
		case r := <-got:
			t.Fatalf("c: Acquire returned before waiting: %v, %v", r.l, r.err)
		}
		// The release reaches the follower; then the follower is cut off,
		// and the leader expires c's session and grants d the lock.
		if err := held.Release(ctx); err != nil {
			t.Fatalf("a: Release: %v", err)
		}
		waitFor(t, "the follower to see the release", func() bool {
			n, _, err := onFollower.Children(dir)
			return err == nil && len(n) == 1
		})
		cut(t, follower)
		expired(t, onLeader, dir)
		ld, err := d.Acquire(ctx, key, driver.AcquireOptions{TTL: sessionTimeout})
		if err != nil {
			t.Fatalf("d: Acquire after the leader expired c's session: %v", err)
		}
		stale(t, onFollower, dir, waiting)
		// c goes on: its predecessor is gone, and the follower lists its
		// node first.
		release()
		select {
		case r := <-got:
			if r.err == nil {
				t.Fatalf("c was granted the lock (token %d) on the cut-off server's answers while d holds it (token %d)", r.l.Token(), ld.Token())
			}
			t.Fatalf("c: Acquire failed while the cut-off server still served (%v): want it waiting", r.err)
		case <-time.After(2 * cutOffSession):
			// Time for the stale server to answer, as it did before the fix:
			// c was granted within milliseconds. Not granted meanwhile, c
			// cannot be later either: a sync answered after the links heal
			// follows the leader's end of c's session.
		}
		stale(t, onFollower, dir, waiting)
		synced(t, p)
		// Once the follower is back with its leader, c learns that its
		// session expired.
		mu.Lock()
		healNow(links[follower.ID])
		mu.Unlock()
		r := <-got
		if r.err == nil {
			t.Fatalf("c was granted the lock (token %d) while d holds it (token %d)", r.l.Token(), ld.Token())
		}
		t.Logf("c: Acquire: %v", r.err)
	})

	t.Run("refresh", func(t *testing.T) {
		const key = "cut-off-refresh"
		leader, follower := members(t)
		ctx := testCtx(t)
		onLeader := adminConn(t, []string{leader.Addr})
		onFollower := adminConn(t, []string{follower.Addr})
		p := startCountingProxy(t, follower.Addr)
		c := newBackendTimeout(t, []string{p.addr()}, cutOffSession, zklock.WithRequestTimeout(time.Second))
		d := newBackend(t, []string{leader.Addr})
		dir := c.KeyPath(key)
		lc, err := c.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Second})
		if err != nil {
			t.Fatalf("c: Acquire: %v", err)
		}
		node := waitNodes(t, onLeader, key, 1)[0]
		cut(t, follower)
		expired(t, onLeader, dir)
		ld, err := d.Acquire(ctx, key, driver.AcquireOptions{TTL: sessionTimeout})
		if err != nil {
			t.Fatalf("d: Acquire after the leader expired c's session: %v", err)
		}
		stale(t, onFollower, dir, node)
		p.take()
		if v, err := lc.Refresh(ctx, time.Second); err == nil {
			t.Fatalf("c's lock (token %d) was renewed (%+v) on the cut-off server's answers while d holds it (token %d)", lc.Token(), v, ld.Token())
		} else {
			t.Logf("c: Refresh: %v", err)
		}
		stale(t, onFollower, dir, node)
		synced(t, p)
	})
}

// healNow heals the proxies ps at once (the test's cleanup heals them
// again, harmlessly, and waits for the ensemble).
func healNow(ps []*faultproxy.Proxy) {
	for _, p := range ps {
		p.Heal()
	}
}
