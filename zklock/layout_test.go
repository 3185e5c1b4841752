package zklock_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
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
	l, err := b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute, Owner: "host-a:123"})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	dir := zklock.LockPath(zklock.DefaultPrefix, key)
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
	if _, err := b.Acquire(ctx, "layout/curator", distlock.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrNotAcquired) {
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

	// zkCli.sh shows the same queue.
	if cli := "/usr/share/zookeeper/bin/zkCli.sh"; fileExists(cli) {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		out, err := exec.CommandContext(cctx, cli, "-server", z.Servers[0], "ls", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("zkCli.sh ls %s: %v\n%s", dir, err, out)
		}
		if !strings.Contains(string(out), "["+nodes[0]+"]") {
			t.Errorf("zkCli.sh ls %s does not show [%s]:\n%s", dir, nodes[0], out)
		}
	} else if os.Getenv("CI") == "true" {
		t.Errorf("zkCli.sh not found at %s", cli)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
