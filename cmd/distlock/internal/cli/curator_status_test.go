//go:build linux

package cli_test

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/testserver"
)

// `distlock status --json` lists a lock that a Curator client holds, as
// Curator's InterProcessMutex leaves it: a protected ephemeral sequential
// node under the key's path, its data the participant's id. The token is
// the node's czxid, and the owner its data. (zklock's Curator test runs
// Java; this one writes the node as Curator would, so that it needs none.)
func TestStatusListsACuratorHolder(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	conn, _, err := zk.Connect(z.Servers, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	dir := "/distlock/curator%2Forders" // the path of key curator/orders under the default prefix
	for _, p := range []string{"/distlock", dir} {
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	node, err := conn.Create(dir+"/_c_0b1c8f2e-5d4e-4f8a-9c3b-2a1d7e6f5a40-lock-", []byte("java-service"),
		zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := conn.Get(node)
	if err != nil {
		t.Fatal(err)
	}

	r := newEnv(t).run("--backend", "zk://"+z.ConnectString(), "status", "--json", "curator/")
	if r.code != 0 {
		t.Fatalf("distlock status: exit %d, stderr %q", r.code, r.stderr)
	}
	var status []struct {
		Key   string `json:"key"`
		Token string `json:"token"`
		Owner string `json:"owner"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &status); err != nil {
		t.Fatalf("distlock status --json: %v\n%s", err, r.stdout)
	}
	if len(status) != 1 || status[0].Key != "curator/orders" || status[0].Owner != "java-service" ||
		status[0].Token != strconv.FormatInt(st.Czxid, 10) {
		t.Errorf("distlock status --json:\n%s\nwant key curator/orders, token %d (the node's czxid), owner java-service", r.stdout, st.Czxid)
	}
}
