package zklock_test

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The session timeouts of the tests' Backends. sessionTimeout, long, is
// for tests that need no expiry: a loaded machine then does not lose a
// lock to a refresh that came late. shortSession is for the Backends whose
// session a test makes expire, so that expiries take little time (the test
// servers' tick is 200ms); conformanceSession for the suite, whose lapses
// and partitions wait for a few session timeouts.
const (
	sessionTimeout     = 15 * time.Second
	shortSession       = 2 * time.Second
	conformanceSession = 5 * time.Second
)

// newBackend returns a Backend on servers, closed when the test ends.
func newBackend(t testing.TB, servers []string, opts ...zklock.Option) *zklock.Backend {
	t.Helper()
	opts = append([]zklock.Option{zklock.WithSessionTimeout(sessionTimeout)}, opts...)
	b, err := zklock.New(servers, opts...)
	if err != nil {
		t.Fatalf("zklock.New: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// adminConn returns a plain zk connection with its session made, for
// looking at and changing the tree behind the Backends' backs.
func adminConn(t testing.TB, servers []string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatalf("zk.Connect: %v", err)
	}
	t.Cleanup(c.Close)
	if _, _, err := c.Exists("/"); err != nil {
		t.Fatalf("admin connection: %v", err)
	}
	return c
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// nodesOf returns the lock nodes of key, in queue order.
func nodesOf(t testing.TB, admin *zk.Conn, key string) []string {
	t.Helper()
	children, _, err := admin.Children(zklock.LockPath(zklock.DefaultPrefix, key))
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		t.Fatalf("children of %q: %v", key, err)
	}
	return zklock.SortNodes(children)
}

// deleteHolder deletes the first node of key's lock, as an operator would.
func deleteHolder(t testing.TB, admin *zk.Conn, key string) {
	t.Helper()
	nodes := nodesOf(t, admin, key)
	if len(nodes) == 0 {
		t.Fatalf("no holder of %q", key)
	}
	if err := admin.Delete(zklock.LockPath(zklock.DefaultPrefix, key)+"/"+nodes[0], -1); err != nil {
		t.Fatalf("delete the holder of %q: %v", key, err)
	}
}

func TestConformance(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	distlocktest.Run(t,
		func(t *testing.T) driver.Backend { return newBackendTimeout(t, z.Servers, conformanceSession) },
		distlocktest.WithTTL(conformanceSession),
		// The admin connection is the test's own: one that lived through
		// the suite would start goroutines inside a later test when it
		// reconnected (on a slow ping), and fail that test's leak check.
		distlocktest.WithRevoke(func(t *testing.T, key string) { deleteHolder(t, adminConn(t, z.Servers), key) }),
		distlocktest.WithUnreachable(func(t *testing.T) driver.Backend {
			// Nothing listens on the port: the zk client fails queued
			// requests with ErrNoServer once it has tried the address
			// twice (a round of tries, see hosts).
			return newBackendTimeout(t, []string{"127.0.0.1:" + strconv.Itoa(testserver.FreePort(t))}, conformanceSession, zklock.WithRequestTimeout(time.Second))
		}),
	)
}

// The permits of Curator's InterProcessSemaphoreV2 layout: the limit is
// not stored and slots are not named. A revoke deletes the semaphore's
// oldest lease node, as the ensemble does when its holder's session ends.
func TestSemaphoreConformance(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	distlocktest.RunSemaphore(t,
		func(t *testing.T) driver.Backend { return newBackendTimeout(t, z.Servers, conformanceSession) },
		distlocktest.WithTTL(conformanceSession),
		distlocktest.WithRevoke(func(t *testing.T, key string) { deleteLease(t, adminConn(t, z.Servers), key) }),
		distlocktest.WithUnstoredLimit(),
		distlocktest.WithoutSlots(),
	)
}

// Shared locks in the layout of Curator's InterProcessReadWriteLock. A
// revoke deletes every node of the key, as the ensemble does when their
// session ends: the suite's abandoned readers share one Backend, and so
// one session.
func TestSharedConformance(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	distlocktest.RunShared(t,
		func(t *testing.T) driver.Backend { return newBackendTimeout(t, z.Servers, conformanceSession) },
		distlocktest.WithTTL(conformanceSession),
		distlocktest.WithRevoke(func(t *testing.T, key string) { deleteNodes(t, adminConn(t, z.Servers), key) }),
	)
}

// deleteNodes deletes every node under key's lock path.
func deleteNodes(t testing.TB, admin *zk.Conn, key string) {
	t.Helper()
	for _, n := range nodesOf(t, admin, key) {
		if err := admin.Delete(zklock.LockPath(zklock.DefaultPrefix, key)+"/"+n, -1); err != nil && err != zk.ErrNoNode {
			t.Fatalf("delete %s of %q: %v", n, key, err)
		}
	}
}

// leasesOf returns the lease nodes of the semaphore at key's path, in
// token (czxid) order.
func leasesOf(t testing.TB, admin *zk.Conn, key string) []string {
	t.Helper()
	dir := zklock.LockPath(zklock.DefaultPrefix, key) + "/leases"
	children, _, err := admin.Children(dir)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		t.Fatalf("leases of %q: %v", key, err)
	}
	czxid := map[string]int64{}
	var live []string
	for _, c := range children {
		_, st, err := admin.Get(dir + "/" + c)
		if err == zk.ErrNoNode {
			continue
		}
		if err != nil {
			t.Fatalf("lease %s of %q: %v", c, key, err)
		}
		czxid[c] = st.Czxid
		live = append(live, c)
	}
	slices.SortFunc(live, func(a, b string) int { return cmp.Compare(czxid[a], czxid[b]) })
	return live
}

// deleteLease deletes every lease node of the semaphore at key's path,
// as the ensemble does when their holders' sessions end.
func deleteLease(t testing.TB, admin *zk.Conn, key string) {
	t.Helper()
	leases := leasesOf(t, admin, key)
	if len(leases) == 0 {
		t.Fatalf("no permit of %q", key)
	}
	for _, l := range leases {
		if err := admin.Delete(zklock.LockPath(zklock.DefaultPrefix, key)+"/leases/"+l, -1); err != nil {
			t.Fatalf("delete the permit %s of %q: %v", l, key, err)
		}
	}
}

// testCtx returns a context that bounds a whole test.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitNodes waits until key's lock has n nodes and returns them in queue
// order.
func waitNodes(t testing.TB, admin *zk.Conn, key string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		nodes := nodesOf(t, admin, key)
		if len(nodes) == n {
			return nodes
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q has nodes %q after 30s, want %d", key, nodes, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newBackendTimeout returns a Backend on servers with the given session
// timeout, closed when the test ends.
func newBackendTimeout(t testing.TB, servers []string, timeout time.Duration, opts ...zklock.Option) *zklock.Backend {
	t.Helper()
	return newBackend(t, servers, append([]zklock.Option{zklock.WithSessionTimeout(timeout)}, opts...)...)
}

func testCtxFor(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
