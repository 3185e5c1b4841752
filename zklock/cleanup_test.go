package zklock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/testserver"
)

// Failed tries and cancelled waits leave no node behind: only the holder's
// node remains, so the queue is not blocked by nobody.
func TestNoNodeLeftByFailedAcquires(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "cleanup/" + t.Name()
	hl, err := newBackend(t, z.Servers).Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	other := newBackend(t, z.Servers)
	for range 5 {
		if _, err := other.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrNotAcquired) {
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
			_, err := other.Acquire(wctx, key, distlock.AcquireOptions{TTL: time.Minute, Wait: true})
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
	hl, err := newBackend(t, z.Servers).Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	p := faultproxy.Start(t, z.Servers[0])
	// A long session timeout: pings are rare, so the reply dropped is the
	// create's.
	b := newBackendTimeout(t, []string{p.Addr()}, 20*time.Second)
	warm, err := b.Acquire(ctx, key+"/warm-up", distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("warm-up Acquire: %v", err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatalf("warm-up Release: %v", err)
	}
	sid := b.Conn().SessionID()

	p.DropReplies()
	type result struct {
		l   distlock.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute, Wait: true})
		done <- result{l, err}
	}()
	nodes := waitNodes(t, admin, key, 2)
	p.Heal()
	ours := nodes[1]

	if err := hl.Release(ctx); err != nil {
		t.Fatalf("holder Release: %v", err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("not granted after the holder's release; nodes now %q", nodesOf(t, admin, key))
	}
	if r.err != nil {
		t.Fatalf("Acquire: %v", r.err)
	}
	if got := b.Conn().SessionID(); got != sid {
		t.Fatalf("the session changed (%#x to %#x): the test did not keep it", sid, got)
	}
	if path := r.l.(interface{ Path() string }).Path(); !strings.HasSuffix(path, "/"+ours) {
		t.Errorf("granted with node %s, want the one created when the reply was lost, %s", path, ours)
	}
	if nodes := nodesOf(t, admin, key); len(nodes) != 1 || nodes[0] != ours {
		t.Errorf("nodes %q, want only %q", nodes, ours)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
