package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/testserver"
)

// A waiter's watch of its predecessor starts after the revision etcd is at,
// so that etcd registers it among its synced watchers at once: a watch
// that starts at or before the current revision waits for etcd's catch-up
// loop (every 100ms), and a release in the meantime is seen that late.
func TestWaiterWatchStartsSynced(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ba := newBackend(t, newClient(t, e.Endpoints))
	bb := newBackend(t, newClient(t, e.Endpoints))
	watches := etcdlock.InterceptWatches(bb)
	ctx := testCtx(t)
	const key = "synced-watch"
	opts := driver.AcquireOptions{TTL: 10 * time.Second, Wait: true}
	la, err := ba.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatal(err)
	}

	type result struct {
		l   driver.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := bb.Acquire(ctx, key, opts)
		got <- result{l, err}
	}()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	start, ok := watches.Next(wctx)
	cancel()
	if !ok {
		select {
		case r := <-got:
			t.Fatalf("B's acquire ended without a watch: %v, %v", r.l, r.err)
		default:
			t.Fatal("B opened no watch while A held the key")
		}
	}
	// Nothing else writes to this etcd: its revision now is the one B's
	// watch was opened at.
	resp, err := admin.Get(ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	if now := resp.Header.Revision; start <= now {
		t.Errorf("B's watch starts at revision %d, etcd is at %d: it is registered unsynced", start, now)
	}

	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("B's acquire after A's release: %v", r.err)
	}
	if r.l.Token() <= la.Token() {
		t.Errorf("B's token %d is not above A's %d", r.l.Token(), la.Token())
	}
	if err := r.l.Release(ctx); err != nil {
		t.Error(err)
	}
}

// A write between the read of the predecessor and the opening of its watch
// may leave the watch unsynced: the waiter reads again and opens a new
// watch from there, a bounded number of times, and keeps the last watch
// when writes never pause; it gets the lock after the release either way.
func TestWaiterResyncsBounded(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ba := newBackend(t, newClient(t, e.Endpoints))
	bb := newBackend(t, newClient(t, e.Endpoints))
	watches := etcdlock.InterceptWatches(bb)
	ctx := testCtx(t)
	watches.BeforeEach(func() {
		if _, err := admin.Put(ctx, "unrelated", "x"); err != nil {
			t.Error(err)
		}
	})
	const key = "resync-watch"
	opts := driver.AcquireOptions{TTL: 10 * time.Second, Wait: true}
	la, err := ba.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   driver.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := bb.Acquire(ctx, key, opts)
		got <- result{l, err}
	}()
	var starts []int64
	for len(starts) < etcdlock.MaxResyncs+1 {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rev, ok := watches.Next(wctx)
		cancel()
		if !ok {
			t.Fatalf("B opened %d watches (starts %v), want %d: one, then one per resync", len(starts), starts, etcdlock.MaxResyncs+1)
		}
		starts = append(starts, rev)
	}
	for i := 1; i < len(starts); i++ {
		if starts[i] <= starts[i-1] {
			t.Errorf("watch %d starts at %d, not after the previous one (%d)", i, starts[i], starts[i-1])
		}
	}
	watches.BeforeEach(func() {})
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("B's acquire after A's release: %v", r.err)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Error(err)
	}
	// The last watch was kept: it saw the release, and no other was opened.
	if n := watches.Pending(); n != 0 {
		t.Errorf("B opened %d more watches after %d resyncs", n, etcdlock.MaxResyncs)
	}
}
