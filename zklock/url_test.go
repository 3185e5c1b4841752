package zklock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

func TestOpenURLBad(t *testing.T) {
	const secret = "s3cr3t-P@ss"
	for _, raw := range []string{
		"etcd://h1:2181",
		"zk://",
		"zk:alice:" + secret + "@h1:2181",
		"zk:///alice:" + secret + "@h1:2181",
		"zk://h1:2181,,h2",
		"zk://alice:" + secret + "@h1:2181?nope=1",
		"zk://alice:" + secret + "@h1:2181?session_timeout=soon",
		"zk://alice" + secret + "@h1:2181",
		"zk://alice:" + secret + "@h1:2181/zookeeper",
		"zk://alice:" + secret + "@h1:2181/a/../b",
		"zk://" + secret + "h1 x:2181",
		"zk://h1:2181?" + secret + "=1",
		"zk://::1",
	} {
		b, err := zklock.OpenURL(context.Background(), raw)
		if err == nil {
			b.Close()
			t.Errorf("OpenURL accepted a bad URL (%d bytes)", len(raw))
			continue
		}
		if !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("error %q does not match ErrInvalidOption", err)
		}
		// The URL is shown redacted (driver.ParseURL): hosts, never the user
		// information.
		for _, s := range []string{secret, "alice"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("error %q shows %q", err, s)
			}
		}
	}
}

// OpenURL with digest credentials: the locks' nodes carry the user's ACL
// (anyone may read), and the prefix of the URL applies.
func TestOpenURLDigest(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	b, err := zklock.OpenURL(ctx, "zk://alice:p%2Fw@d:x@"+z.ConnectString()+"/apps/locks?session_timeout=2s&request_timeout=3s")
	if err != nil {
		t.Fatalf("OpenURL: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	l, err := b.Acquire(ctx, "k", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	dir := zklock.LockPath("/apps/locks", "k")
	children, _, err := admin.Children(dir)
	if err != nil || len(children) != 1 {
		t.Fatalf("children of %s: %q, %v", dir, children, err)
	}
	acl, _, err := admin.GetACL(dir + "/" + children[0])
	if err != nil {
		t.Fatal(err)
	}
	// The server shows the digest as "x" to other identities.
	if len(acl) != 2 || acl[0].Scheme != "digest" || !strings.HasPrefix(acl[0].ID, "alice:") || acl[0].Perms != zk.PermAll ||
		acl[1] != zk.WorldACL(zk.PermRead)[0] {
		t.Errorf("ACL %+v, want alice's digest with every permission and anyone's read", acl)
	}
	// Another identity cannot delete the holder's node.
	if err := admin.Delete(dir+"/"+children[0], -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("delete by another identity: %v, want zk.ErrNoAuth", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

func TestOpenURLHosts(t *testing.T) {
	for raw, want := range map[string]string{
		"zk://h1":                            "h1:2181",
		"zk://h1:2182,h2/prefix":             "h1:2182,h2:2181",
		"zk://[::1]:2183,[fe80::1]":          "[::1]:2183,[fe80::1]:2181",
		"zk://u:p@ss@h1?request_timeout=1s":  "h1:2181",
		"zk://u:p@h1:1,h2:2,h3:3/a/b/?a=%40": "",
	} {
		got, err := zklock.URLServers(raw)
		if want == "" {
			if err == nil {
				t.Errorf("%d-byte URL with an unknown parameter accepted", len(raw))
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != want {
			t.Errorf("servers %q, %v; want %s", got, err, want)
		}
	}
}
