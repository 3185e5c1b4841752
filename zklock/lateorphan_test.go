package zklock_test

import (
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

// A node of our own session with our protected name that a listing of the
// claim did not show (a create whose reply was lost, still on its way to
// the leader when the claim listed the lock, and applied after the create
// was redone) is ours to delete, wherever it is in the queue. Ahead of our
// node it would be the predecessor we wait for, which nobody deletes while
// the session lives: the lock held by nobody, for us and for everyone
// behind us. The node is made here through the Backend's own connection,
// so that it is in the Backend's session, as such a late node would be.
func TestLateNodeOfOursAheadIsDeleted(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "late/" + t.Name()
	dir := zklock.LockPath(zklock.DefaultPrefix, key)
	uuid, err := zklock.NewUUID()
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, z.Servers)
	b.SetUUID(func() (string, error) { return uuid, nil })
	makeLockDir(t, admin, dir)
	late, err := b.Conn().Create(dir+"/"+zklock.NodePrefix(uuid, "lock-"), []byte("late"), zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatalf("create the late node: %v", err)
	}
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("try with only a node of ours ahead: %v, want the lock (nodes %q)", err, nodesOf(t, admin, key))
	}
	if got := l.(interface{ Path() string }).Path(); got == late {
		t.Fatalf("granted with the late node %s", got)
	}
	if nodes := nodesOf(t, admin, key); len(nodes) != 1 || dir+"/"+nodes[0] != l.(interface{ Path() string }).Path() {
		t.Errorf("nodes %q, want only the granted one", nodes)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if nodes := nodesOf(t, admin, key); len(nodes) != 0 {
		t.Errorf("after the release: nodes %q, want none", nodes)
	}
}

// After an acquire in which a create's reply was lost, the release also
// deletes a node with our protected name behind ours (that create,
// applied after the grant): left there, it would hold the lock for nobody
// once ours is gone, until the session ended.
func TestLateNodeOfOursBehindIsDeletedAtRelease(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "late/" + t.Name()
	dir := zklock.LockPath(zklock.DefaultPrefix, key)
	uuid, err := zklock.NewUUID()
	if err != nil {
		t.Fatal(err)
	}
	hl, err := newBackend(t, z.Servers).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	b, p, sid := lossyBackend(t, ctx, z.Servers[0], key, uuid)

	done := acquireLosingReplies(t, ctx, b, p, key)
	waitNodes(t, admin, key, 2)
	p.Heal()
	if err := hl.Release(ctx); err != nil {
		t.Fatalf("holder Release: %v", err)
	}
	l := granted(t, admin, key, done, b, sid)
	late, err := b.Conn().Create(dir+"/"+zklock.NodePrefix(uuid, "lock-"), []byte("late"), zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
	if err != nil {
		t.Fatalf("create the late node: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if nodes := nodesOf(t, admin, key); len(nodes) != 0 {
		t.Fatalf("after the release: nodes %q, want none (the late node %s holds the lock for nobody)", nodes, late)
	}
	other, err := newBackend(t, z.Servers).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("try after the release: %v, want the lock", err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
