package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// The holder of one key (Holder, WatchHolder, SetOwner) and the election
// suite against a real ensemble: a watch is woken by ZooKeeper watches on
// the lock path, and candidacies are kept in Curator's LeaderLatch layout.
func TestHolderAndElection(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	factory := func(t *testing.T) driver.Backend { return newBackendTimeout(t, z.Servers, conformanceSession) }
	opts := []distlocktest.Option{
		distlocktest.WithTTL(conformanceSession),
		distlocktest.WithRevoke(func(t *testing.T, key string) { deleteHolder(t, adminConn(t, z.Servers), key) }),
	}
	t.Run("Holder", func(t *testing.T) { distlocktest.RunHolder(t, factory, opts...) })
	t.Run("Election", func(t *testing.T) { distlocktest.RunElection(t, factory, opts...) })
}

// A long watch of a holder keeps one watch on the lock path and one on
// its first node in the zk client, however many changes wake it: each
// event sets again only the watch it fired. The zk client adds a watch to
// a list at every request that sets one, and only the watch's event
// empties the list, so setting both again at every event grew the list of
// the watch that did not fire by one per event (a new owner fires the
// node's watch, not the path's; a waiter coming or going, the path's,
// not the node's).
func TestWatchHolderKeepsOneWatchEach(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	ctx := testCtx(t)
	key := "holder/" + t.Name()
	b := newBackend(t, z.Servers)
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: sessionTimeout, Owner: "owner 0"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w, err := b.WatchHolder(wctx, key)
	if err != nil {
		t.Fatal(err)
	}
	woken := func(what string) {
		t.Helper()
		select {
		case <-w:
		case <-time.After(30 * time.Second):
			t.Fatalf("the watch was not woken within 30s after %s", what)
		}
	}
	// Once the watch has caught up: a children watch on the path and a
	// data watch on the holder's node.
	if b.ClientWatches() < 0 {
		t.Fatal("the zk client keeps its watches otherwise than go-zookeeper v1.0.4: update ClientWatches")
	}
	settled := func(what string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for n := b.ClientWatches(); n != 2; n = b.ClientWatches() {
			if time.Now().After(deadline) {
				t.Fatalf("the zk client keeps %d watches after %s, want 2", n, what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	const changes = 50
	// New owners: the first node's data changes, and the path's children
	// do not.
	for i := 1; i <= changes; i++ {
		if err := l.(driver.OwnerSetter).SetOwner(ctx, fmt.Sprintf("owner %d", i)); err != nil {
			t.Fatal(err)
		}
		woken("SetOwner")
	}
	settled(fmt.Sprintf("%d new owners", changes))
	// Tries that fail: a node comes and goes behind the holder's, whose
	// data does not change.
	other := newBackend(t, z.Servers)
	for range changes {
		if _, err := other.Acquire(ctx, key, driver.AcquireOptions{TTL: sessionTimeout}); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("try while held: %v, want ErrNotAcquired", err)
		}
		woken("a try")
	}
	settled(fmt.Sprintf("%d tries", changes))
	stop()
	for range w {
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
