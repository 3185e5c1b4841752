package zklock_test

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

// zkCliPath is where Debian's zookeeper package installs ZooKeeper's own
// command-line client.
const zkCliPath = "/usr/share/zookeeper/bin/zkCli.sh"

// zkCli runs one zkCli.sh command against server and returns its output.
func zkCli(t testing.TB, server string, args ...string) string {
	t.Helper()
	if !fileExists(zkCliPath) {
		testserver.Missing(t, "zkCli.sh ("+zkCliPath+")")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, zkCliPath, append([]string{"-server", server}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("zkCli.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// zkCliList is the list of names that zkCli.sh's ls printed.
var zkCliList = regexp.MustCompile(`(?m)^\[(.*)\]$`)

func zkCliLs(t testing.TB, server, path string) []string {
	t.Helper()
	out := zkCli(t, server, "ls", path)
	m := zkCliList.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("zkCli.sh ls %s printed no list:\n%s", path, out)
	}
	if m[1] == "" {
		return nil
	}
	return strings.Split(m[1], ", ")
}

// ZooKeeper's own client, zkCli.sh, sees the lock as documented while
// distlock holds it: the escaped key as a child of the prefix, under it one
// node named _c_<uuid>-lock-<sequence> whose owner is the holder's session,
// whose czxid is the lock's token and whose data is the holder's owner; and
// nothing once it is released.
func TestZkCliSeesLayout(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	ctx := testCtx(t)
	key := "reports/nightly"
	b := newBackendTimeout(t, z.Servers, holdTimeout)
	locks := newClient(t, b, distlock.WithOwner("host-a:123"), distlock.WithTTL(holdTimeout))
	l, err := locks.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	srv := z.Servers[0]
	if got := zkCliLs(t, srv, zklock.DefaultPrefix); len(got) != 1 || got[0] != "reports%2Fnightly" {
		t.Fatalf("zkCli.sh ls %s: %q, want [reports%%2Fnightly]", zklock.DefaultPrefix, got)
	}
	dir := zklock.DefaultPrefix + "/reports%2Fnightly"
	nodes := zkCliLs(t, srv, dir)
	if len(nodes) != 1 || !nodeName.MatchString(nodes[0]) {
		t.Fatalf("zkCli.sh ls %s: %q, want one _c_<uuid>-lock-<sequence>", dir, nodes)
	}
	node := dir + "/" + nodes[0]
	stat := zkCli(t, srv, "stat", node)
	for _, want := range []string{
		fmt.Sprintf("ephemeralOwner = %#x", b.Conn().SessionID()),
		fmt.Sprintf("cZxid = %#x", l.Token()),
	} {
		if !strings.Contains(stat, want+"\n") {
			t.Errorf("zkCli.sh stat %s does not show %q:\n%s", node, want, stat)
		}
	}
	if out := zkCli(t, srv, "get", node); !strings.Contains(out, "\nhost-a:123\n") {
		t.Errorf("zkCli.sh get %s does not show the owner host-a:123:\n%s", node, out)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := zkCliLs(t, srv, dir); len(got) != 0 {
		t.Errorf("zkCli.sh ls %s after the release: %q, want []", dir, got)
	}
}
