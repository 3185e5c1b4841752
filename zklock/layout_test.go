package zklock_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

var nodeName = regexp.MustCompile(`^_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-lock-[0-9]{10}$`)

// The nodes are laid out as Curator lays them out, List reports their
// holders (a Curator lock made without protection included), and such a
// lock excludes this package's.
func TestLayoutAndList(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "layout/a b"
	b := newBackend(t, z.Servers)
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "host-a:123"})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	dir := b.KeyPath(key)
	if want := zklock.DefaultPrefix + "/layout%2Fa b"; dir != want {
		t.Errorf("KeyPath(%q) = %q, want %q", key, dir, want)
	}
	nodes := nodesOf(t, admin, key)
	if len(nodes) != 1 || !nodeName.MatchString(nodes[0]) {
		t.Fatalf("nodes under %s: %q, want one _c_<uuid>-lock-<seq>", dir, nodes)
	}
	data, st, err := admin.Get(dir + "/" + nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "host-a:123" || uint64(st.Czxid) != l.Token() || st.EphemeralOwner != b.Conn().SessionID() {
		t.Errorf("node data %q, czxid %d, owner %#x; want the owner, the token %d, the session %#x", data, st.Czxid, st.EphemeralOwner, l.Token(), b.Conn().SessionID())
	}
	// A lock taken by Curator without protection, on the path of key
	// "curator".
	cdir := zklock.LockPath(zklock.DefaultPrefix, "layout/curator")
	if _, err := admin.CreateContainer(cdir, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	cnode, err := admin.Create(cdir+"/lock-", []byte("10.0.0.7"), zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	_, cst, err := admin.Get(cnode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "layout/curator", driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("try of a key Curator holds: %v, want ErrNotAcquired", err)
	}

	holders, err := b.List(ctx, "layout/")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(holders) != 2 {
		t.Fatalf("List: %+v, want 2 holders", holders)
	}
	h0, h1 := holders[0], holders[1]
	if h0.Key != key || h0.Token != l.Token() || h0.Owner != "host-a:123" || h0.Since.IsZero() {
		t.Errorf("List[0] = %+v", h0)
	}
	if h1.Key != "layout/curator" || h1.Token != uint64(cst.Czxid) || h1.Owner != "10.0.0.7" {
		t.Errorf("List[1] = %+v", h1)
	}
	if hs, err := b.List(ctx, "nothing/"); err != nil || len(hs) != 0 {
		t.Errorf("List of an unused prefix: %+v, %v", hs, err)
	}

	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// containerPaths returns the paths that z's single server created as
// container nodes, as ZooKeeper's TxnLogToolkit reads them from its
// transaction log (clients cannot tell a container from a persistent node:
// the server reports both with ephemeral owner 0).
func containerPaths(t testing.TB, z *testserver.ZooKeeper) map[string]bool {
	t.Helper()
	java := testserver.Require(t, "java")
	jars := []string{"/usr/share/java/zookeeper.jar", "/usr/share/java/zookeeper-jute.jar", "/usr/share/java/slf4j-nop.jar"}
	for _, j := range jars {
		if !fileExists(j) {
			testserver.Missing(t, j)
		}
	}
	logs, err := filepath.Glob(filepath.Join(z.Members[0].Dir, "data", "version-2", "log.*"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("no transaction log in %s: %v", z.Members[0].Dir, err)
	}
	paths := map[string]bool{}
	for _, l := range logs {
		out, err := exec.Command(java, "-cp", strings.Join(jars, ":"), "org.apache.zookeeper.server.persistence.TxnLogToolkit", l).CombinedOutput()
		if err != nil {
			t.Fatalf("TxnLogToolkit %s: %v\n%s", l, err, out)
		}
		for _, m := range createContainer.FindAllSubmatch(out, -1) {
			paths[string(m[1])] = true
		}
	}
	return paths
}

// createContainer matches a container create in TxnLogToolkit's output.
var createContainer = regexp.MustCompile(`(?m) createContainer (/[^,\n]*),`)

// On a real ensemble, every key is one child of the prefix, whatever it
// holds ("/", "..", "%"), nothing is created outside the prefix, List
// gives the keys back, and the prefix's segments and the lock paths are
// container nodes, which the ensemble deletes once their last child is gone.
func TestKeysStayUnderPrefixInContainers(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	const prefix = "/apps/locks"
	b := newBackend(t, z.Servers, zklock.WithPrefix(prefix))
	keys := []string{"a", "a/b", "a%2Fb", "..", ".", "../x", "/", "a/../../zookeeper", "%", "\U0001F512", "é/."}
	var want []string
	for _, k := range keys {
		l, err := b.Acquire(ctx, k, driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatalf("Acquire(%q): %v", k, err)
		}
		defer l.Release(ctx)
		p := zklock.LockPath(prefix, k)
		want = append(want, p[len(prefix)+1:])
	}
	for _, tc := range []struct {
		dir  string
		want []string
	}{
		{"/", []string{"apps", "zookeeper"}},
		{"/apps", []string{"locks"}},
		{prefix, want},
	} {
		got, _, err := admin.Children(tc.dir)
		if err != nil {
			t.Fatalf("children of %s: %v", tc.dir, err)
		}
		slices.Sort(got)
		slices.Sort(tc.want)
		if !slices.Equal(got, tc.want) {
			t.Errorf("children of %s: %q, want %q", tc.dir, got, tc.want)
		}
	}
	containers := containerPaths(t, z)
	for _, p := range []string{"/apps", prefix} {
		if !containers[p] {
			t.Errorf("%s is not a container node; containers: %v", p, containers)
		}
	}
	for _, k := range keys {
		dir := zklock.LockPath(prefix, k)
		if _, st, err := admin.Get(dir); err != nil || st.NumChildren != 1 {
			t.Errorf("lock path of %q, %s: stat %+v, %v; want one child", k, dir, st, err)
		}
		if !containers[dir] {
			t.Errorf("lock path of %q, %s, is not a container node", k, dir)
		}
	}
	holders, err := b.List(ctx, "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var listed []string
	for _, h := range holders {
		listed = append(listed, h.Key)
	}
	sorted := slices.Sorted(slices.Values(keys))
	if !slices.Equal(listed, sorted) {
		t.Errorf("List: keys %q, want %q", listed, sorted)
	}
}
