package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/metrictest"
	"github.com/distlock/distlock/testserver"
)

// A holder whose lease ended while it was paused must not be able to write
// after the next holder: a plain Put is accepted (the fault), a fenced
// transaction is refused (the guard).
func TestFencedTxnRefusesStaleHolder(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)
	const key, resource = "fenced", "resources/fenced"
	mp := metrictest.NewProvider()
	ba := newBackend(t, newClient(t, e.Endpoints))
	bb := newBackend(t, newClient(t, e.Endpoints))
	fa, fb := etcdlock.NewFence(ba, fence.WithMeterProvider(mp)), etcdlock.NewFence(bb, fence.WithMeterProvider(mp))
	ca := newLockClient(t, ba, distlock.WithTTL(3*time.Second))
	cb := newLockClient(t, bb, distlock.WithTTL(3*time.Second))
	get := func() string {
		t.Helper()
		r, err := admin.Get(ctx, resource)
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("get %s: %v %v", resource, r, err)
		}
		return string(r.Kvs[0].Value)
	}

	la, err := ca.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fa.Txn(ctx, la, clientv3.OpPut(resource, "a1")); err != nil {
		t.Fatalf("holder's fenced Txn: %v", err)
	}
	// A prepares a write, then pauses; meanwhile its lease ends in etcd
	// (revoked here, as expiry would) and B takes the lock.
	staleFence, err := fa.Cmp(la)
	if err != nil {
		t.Fatal(err)
	}
	revokeHolder(t, admin, etcdlock.DefaultPrefix, key)
	lb, err := cb.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token %d after %d", lb.Token(), la.Token())
	}
	if _, err := fb.Txn(ctx, lb, clientv3.OpPut(resource, "b")); err != nil {
		t.Fatalf("new holder's fenced Txn: %v", err)
	}

	// A wakes up. Its fenced write is refused by etcd...
	resp, err := ba.Client().Txn(ctx).If(staleFence).Then(clientv3.OpPut(resource, "a2")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Errorf("stale holder's fenced write was applied")
	}
	if v := get(); v != "b" {
		t.Errorf("resource = %q after the stale fenced write, want %q", v, "b")
	}
	// ...and so is one through Txn, once A knows or not.
	_, err = fa.Txn(ctx, la, clientv3.OpPut(resource, "a3"))
	var fe *etcdlock.FenceError
	if !errors.As(err, &fe) || !errors.Is(err, distlock.ErrLockLost) || !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("stale holder's Txn: %v; want a FenceError matching ErrLockLost and fence.ErrStaleToken", err)
	}
	if v := get(); v != "b" {
		t.Errorf("resource = %q after the stale Txn, want %q", v, "b")
	}
	if n := metrictest.Rejections(t, mp, "etcdlock.Fence"); n != 1 {
		t.Errorf("distlock.fence.rejections %d after one refused Txn, want 1", n)
	}
	// Baseline: without the fence, the stale write lands over B's.
	if _, err := ba.Client().Put(ctx, resource, "a4"); err != nil {
		t.Fatal(err)
	}
	if v := get(); v != "a4" {
		t.Fatalf("the fault did not bite: a plain Put left %q", v)
	}
	t.Logf("baseline: the stale holder's plain Put overwrote the new holder's value")

	// The new holder's fence still holds; a released lock has none.
	if _, err := fb.Txn(ctx, lb, clientv3.OpPut(resource, "b2")); err != nil {
		t.Errorf("new holder's fenced Txn: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fb.Cmp(lb); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Cmp of a released lock: %v, want ErrLockLost", err)
	}
	if _, err := fb.Cmp(la); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("Cmp of another backend's lock: %v, want ErrStaleToken", err)
	}
	// A Txn that the Backend refuses itself (the grant is known to have
	// ended) is counted too.
	if _, err := fb.Txn(ctx, lb, clientv3.OpPut(resource, "b3")); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("Txn of a released lock: %v, want ErrStaleToken", err)
	}
	if n := metrictest.Rejections(t, mp, "etcdlock.Fence"); n != 2 {
		t.Errorf("distlock.fence.rejections %d after two refused Txns, want 2", n)
	}
	la.Release(ctx)
}

// A term of an election is fenced as a lock is: its Lock passed to a
// Fence. A leader whose session lease ended while it was paused cannot
// write after the next leader: a plain Put lands (the fault), a fenced
// transaction is refused by etcd (the guard).
func TestFencedTxnRefusesStaleLeader(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ctx := testCtx(t)
	const name, resource = "fenced-election", "resources/fenced-election"
	ba := newBackend(t, newClient(t, e.Endpoints))
	bb := newBackend(t, newClient(t, e.Endpoints))
	fa, fb := etcdlock.NewFence(ba), etcdlock.NewFence(bb)
	ea := newElection(t, ba, name, distlock.WithTTL(suiteTTL))
	eb := newElection(t, bb, name, distlock.WithTTL(suiteTTL))
	get := func() string {
		t.Helper()
		r, err := admin.Get(ctx, resource)
		if err != nil || len(r.Kvs) != 1 {
			t.Fatalf("get %s: %v %v", resource, r, err)
		}
		return string(r.Kvs[0].Value)
	}

	ta, err := ea.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fa.Txn(ctx, ta.Lock(), clientv3.OpPut(resource, "a1")); err != nil {
		t.Fatalf("leader's fenced Txn: %v", err)
	}
	// A prepares a write and pauses; its session lease ends in etcd
	// (revoked here, as expiry would), and B is elected.
	staleFence, err := fa.Cmp(ta.Lock())
	if err != nil {
		t.Fatal(err)
	}
	revokeHolder(t, admin, etcdlock.DefaultPrefix, ea.Key())
	tb, err := eb.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if tb.Token() <= ta.Token() {
		t.Fatalf("term %d after term %d", tb.Token(), ta.Token())
	}
	if _, err := fb.Txn(ctx, tb.Lock(), clientv3.OpPut(resource, "b")); err != nil {
		t.Fatalf("new leader's fenced Txn: %v", err)
	}

	// A wakes: its fenced write is refused by etcd, and through Txn.
	resp, err := ba.Client().Txn(ctx).If(staleFence).Then(clientv3.OpPut(resource, "a2")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded || get() != "b" {
		t.Errorf("the stale leader's fenced write was applied: resource %q", get())
	}
	if _, err := fa.Txn(ctx, ta.Lock(), clientv3.OpPut(resource, "a3")); !errors.Is(err, distlock.ErrLockLost) || !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("stale leader's Txn: %v; want ErrLockLost and fence.ErrStaleToken", err)
	}
	if v := get(); v != "b" {
		t.Errorf("resource = %q after the stale leader's Txn, want %q", v, "b")
	}
	// Baseline: without the fence, the stale leader's write lands.
	if _, err := ba.Client().Put(ctx, resource, "a4"); err != nil {
		t.Fatal(err)
	}
	if v := get(); v != "a4" {
		t.Fatalf("the fault did not bite: a plain Put left %q", v)
	}
	// Resign is Release of the term's Lock: the fence refuses it after.
	if err := tb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fb.Txn(ctx, tb.Lock(), clientv3.OpPut(resource, "b2")); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("Txn of a resigned term: %v, want ErrStaleToken", err)
	}
	ta.Resign(ctx)
}
