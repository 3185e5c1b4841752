package zklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/zklock"
)

// lossyBackend returns a Backend whose connection to server goes through a
// fault proxy, and the id of its session, once it has taken and released a
// lock of key+"/warm-up": the session is up and the lock's parent nodes
// exist, so that the next create of an acquire is the one whose reply the
// proxy can drop. Its session timeout is long, so that pings are rare and
// the reply dropped is the create's. uuid, if not empty, is the Backend's
// protected name.
func lossyBackend(t *testing.T, ctx context.Context, server, key, uuid string) (*zklock.Backend, *faultproxy.Proxy, int64) {
	t.Helper()
	p := faultproxy.Start(t, server)
	b := newBackendTimeout(t, []string{p.Addr()}, 20*time.Second)
	if uuid != "" {
		b.SetUUID(func() (string, error) { return uuid, nil })
	}
	warm, err := b.Acquire(ctx, key+"/warm-up", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("warm-up Acquire: %v", err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatalf("warm-up Release: %v", err)
	}
	return b, p, b.Conn().SessionID()
}

// acquired is the outcome of an Acquire run in the background.
type acquired struct {
	l   driver.Lease
	err error
}

// acquireLosingReplies has p drop every reply, starts a waiting Acquire of
// key by b, whose outcome comes on the channel returned, and waits until
// the proxy has cut the connection that the create went on (the client has
// dialed again). The proxy cuts a connection when it drops a reply; until
// it has, the create's reply may still be on its way, and a Heal would let
// it through: the create would not have lost its reply, and the test would
// prove nothing (or fail, for a test that needs the reply lost).
func acquireLosingReplies(t *testing.T, ctx context.Context, b *zklock.Backend, p *faultproxy.Proxy, key string) <-chan acquired {
	t.Helper()
	conns := p.Conns()
	p.DropReplies()
	done := make(chan acquired, 1)
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		done <- acquired{l, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for p.Conns() == conns {
		if time.Now().After(deadline) {
			t.Fatal("the proxy did not cut the connection within 30s of dropping replies")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return done
}

// granted waits up to 30 seconds for the Acquire of acquireLosingReplies
// to be granted, and checks that b's session is still sid: a new session
// would have cleaned up for the acquire, and the test would prove nothing.
func granted(t *testing.T, admin *zk.Conn, key string, done <-chan acquired, b *zklock.Backend, sid int64) driver.Lease {
	t.Helper()
	var r acquired
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("not granted within 30s; nodes now %q", nodesOf(t, admin, key))
	}
	if r.err != nil {
		t.Fatalf("Acquire: %v", r.err)
	}
	if got := b.Conn().SessionID(); got != sid {
		t.Fatalf("the session changed (%#x to %#x): the test did not keep it", sid, got)
	}
	return r.l
}

// makeLockDir creates the parent nodes of a lock's node, dir, as the
// Backend does, so that a test can create a node there before the
// Backend's first acquire of it.
func makeLockDir(t *testing.T, admin *zk.Conn, dir string) {
	t.Helper()
	for _, p := range []string{zklock.DefaultPrefix, dir} {
		if _, err := admin.CreateContainer(p, nil, zk.FlagContainer, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %v", p, err)
		}
	}
}
