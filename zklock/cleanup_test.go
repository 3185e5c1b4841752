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

// Failed tries and cancelled waits leave no node behind: only the holder's
// node remains, so the queue is not blocked by nobody.
func TestNoNodeLeftByFailedAcquires(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "cleanup/" + t.Name()
	hl, err := newBackend(t, z.Servers).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	other := newBackend(t, z.Servers)
	for range 5 {
		if _, err := other.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("try of a held key: %v, want ErrNotAcquired", err)
		}
	}
	if nodes := nodesOf(t, admin, key); len(nodes) != 1 {
		t.Fatalf("after failed tries: nodes %q, want the holder's only", nodes)
	}
	for i := range 5 {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := other.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			done <- err
		}()
		waitNodes(t, admin, key, 2)
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("cancelled wait %d: %v, want context.Canceled and ErrNotAcquired", i, err)
		}
		if nodes := nodesOf(t, admin, key); len(nodes) != 1 {
			t.Fatalf("after cancelled wait %d: nodes %q, want the holder's only", i, nodes)
		}
	}
	if err := hl.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if nodes := nodesOf(t, admin, key); len(nodes) != 0 {
		t.Fatalf("after the release: nodes %q, want none", nodes)
	}
}

// A create whose reply is lost (the connection breaks right after the
// request took effect) is found again by its protected name and used: the
// acquirer has one node, and gets the lock when the holder releases. Were it
// created again, the first node would stay, owned by the live session, and
// hold the lock for nobody.
func TestLostCreateReplyIsFoundByName(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "cleanup/" + t.Name()
	hl, err := newBackend(t, z.Servers).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	b, p, sid := lossyBackend(t, ctx, z.Servers[0], key, "")

	done := acquireLosingReplies(t, ctx, b, p, key)
	nodes := waitNodes(t, admin, key, 2)
	p.Heal()
	ours := nodes[1]

	if err := hl.Release(ctx); err != nil {
		t.Fatalf("holder Release: %v", err)
	}
	l := granted(t, admin, key, done, b, sid)
	if path := l.(interface{ Path() string }).Path(); !strings.HasSuffix(path, "/"+ours) {
		t.Errorf("granted with node %s, want the one created when the reply was lost, %s", path, ours)
	}
	if nodes := nodesOf(t, admin, key); len(nodes) != 1 || nodes[0] != ours {
		t.Errorf("nodes %q, want only %q", nodes, ours)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A create whose reply is lost while ZooKeeper stays out of reach for a
// while: the reconnects fail too, and the client fails the listing that
// looks for the node with ErrNoServer. The node may still be there, in a
// session that lives on, so a waiting acquire goes on looking within the
// request timeout instead of giving up (and leaving the node to a clean-up
// that races the holder's release).
func TestLostCreateReplyFoundAcrossFailedReconnects(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "cleanup/" + t.Name()
	hl, err := newBackend(t, z.Servers).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	b, p, sid := lossyBackend(t, ctx, z.Servers[0], key, "")
	conns := p.Conns()

	done := acquireLosingReplies(t, ctx, b, p, key)
	nodes := waitNodes(t, admin, key, 2)
	// Five connections after the cut, the handshake's reply dropped on
	// each: the client has paused before the third and the fifth, after
	// rounds of two failed tries (see hosts), and told the requests it
	// had not sent that there is no server; the second pause comes a
	// second after the cut, long after the acquire's listing was queued.
	deadline := time.Now().Add(30 * time.Second)
	for p.Conns() < conns+5 {
		if time.Now().After(deadline) {
			t.Fatalf("the client reconnected %d times in 30s, want 5", p.Conns()-conns)
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.Heal()
	ours := nodes[1]

	if err := hl.Release(ctx); err != nil {
		t.Fatalf("holder Release: %v", err)
	}
	l := granted(t, admin, key, done, b, sid)
	if path := l.(interface{ Path() string }).Path(); !strings.HasSuffix(path, "/"+ours) {
		t.Errorf("granted with node %s, want the one created when the reply was lost, %s", path, ours)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A create whose reply is lost, when a node of another session has the
// protected name it looks for (as a server may still show the node of an
// earlier session of ours whose create's reply was lost too): that node is
// deleted, never taken for ours, and the acquire goes on with a node of its
// own session, the one whose reply was lost if it is there, or one it
// creates again. Taken for ours, the node would be granted while it belongs
// to a session that is not ours (here the grant's check refuses it); left
// alone, it would stay ahead of ours in the queue.
func TestOrphanOfAnotherSessionIsDeleted(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	for _, tc := range []struct {
		name     string
		oursGone bool // our node is gone too: the create must be redone
	}{
		{"ours found too", false},
		{"only the orphan", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			key := "orphan/" + t.Name()
			dir := zklock.LockPath(zklock.DefaultPrefix, key)
			uuid, err := zklock.NewUUID()
			if err != nil {
				t.Fatal(err)
			}
			b, p, sid := lossyBackend(t, ctx, z.Servers[0], key, uuid)
			makeLockDir(t, admin, dir)
			orphan, err := admin.Create(dir+"/"+zklock.NodePrefix(uuid, "lock-"), []byte("earlier"), zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
			if err != nil {
				t.Fatalf("create the orphan: %v", err)
			}

			done := acquireLosingReplies(t, ctx, b, p, key)
			nodes := waitNodes(t, admin, key, 2) // the orphan, then ours
			ours := dir + "/" + nodes[1]
			if dir+"/"+nodes[0] != orphan {
				t.Fatalf("nodes %q, want the orphan %s first", nodes, orphan)
			}
			if tc.oursGone {
				if err := admin.Delete(ours, -1); err != nil {
					t.Fatalf("delete %s: %v", ours, err)
				}
			}
			p.Heal()

			l := granted(t, admin, key, done, b, sid)
			defer l.Release(ctx)
			got := l.(interface{ Path() string }).Path()
			switch {
			case got == orphan:
				t.Fatalf("granted with the orphan %s", got)
			case !tc.oursGone && got != ours:
				t.Errorf("granted with %s, want the node whose reply was lost, %s", got, ours)
			case tc.oursGone && got == ours:
				t.Errorf("granted with %s, which was deleted", got)
			}
			if _, st, err := admin.Get(got); err != nil || st.EphemeralOwner != sid {
				t.Errorf("granted node %s: owner %v, %v; want the session %#x", got, st, err, sid)
			}
			if nodes := nodesOf(t, admin, key); len(nodes) != 1 || dir+"/"+nodes[0] != got {
				t.Errorf("nodes %q, want only the granted one", nodes)
			}
		})
	}
}
