package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/testserver"
)

// ghostTTL is the session TTL of the clean-up tests: long enough that the
// short outages they cause never end A's session, so that only a clean-up
// can free the lock.
const ghostTTL = 10 * time.Second

// cutOff sets up A, a Backend that reaches etcd through a fault proxy with
// a request timeout of 1s, whose session for ghostTTL already exists, and
// C, a Backend with a direct connection.
func cutOff(t *testing.T) (p *faultproxy.Proxy, admin *clientv3.Client, ba, bc *etcdlock.Backend, tries *etcdlock.TryFault) {
	t.Helper()
	e := testserver.StartEtcd(t)
	admin = adminClient(t, e.Endpoints)
	p = faultproxy.Start(t, e.Members[0].ClientAddr)
	ba = newBackend(t, newClient(t, []string{p.Addr()}), etcdlock.WithRequestTimeout(time.Second))
	tries = etcdlock.InterceptTries(ba)
	bc = newBackend(t, newClient(t, e.Endpoints))
	ctx := testCtx(t)
	l := acquireUncut(t, ctx, ba, "warm")
	if err := l.Release(ctx); err != nil && !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatal(err) // unavailable: released in the background
	}
	return p, admin, ba, bc, tries
}

// acquireUncut takes key for A while nothing is cut off. A's request bound
// is short, for the faults that follow; on a loaded machine a request that
// nothing cut off may outlive it too, which is not what these tests are
// about: an unavailable answer is tried again, waiting for the key in case
// the try it ended took it and its clean-up is on its way.
func acquireUncut(t *testing.T, ctx context.Context, ba *etcdlock.Backend, key string) driver.Lease {
	t.Helper()
	for {
		l, err := ba.Acquire(ctx, key, driver.AcquireOptions{TTL: ghostTTL, Wait: true})
		if err == nil {
			return l
		}
		if !errors.Is(err, distlock.ErrUnavailable) || ctx.Err() != nil {
			t.Fatalf("A's acquire of %q, nothing cut off: %v", key, err)
		}
		t.Logf("A's acquire of %q, nothing cut off: %v; trying again", key, err)
	}
}

// ghost checks that key's only etcd key is one of A's session, with the
// network between A and etcd cut, and then heals the network: the fault
// bit.
func ghost(t *testing.T, p *faultproxy.Proxy, admin *clientv3.Client, ba *etcdlock.Backend, key string) clientv3.LeaseID {
	t.Helper()
	// Drop what A sent while cut off, its clean-up included: it never
	// reaches etcd.
	p.Reset()
	id := etcdlock.SessionLease(ba, ghostTTL)
	kvs := keysUnder(t, admin, etcdlock.LockName(etcdlock.DefaultPrefix, key))
	if len(kvs) != 1 || clientv3.LeaseID(kvs[0].Lease) != id {
		p.Heal()
		t.Fatalf("the fault did not bite: %q has keys %v, want one of A's session (lease %x)", key, kvs, int64(id))
	}
	// While the key may linger, A's own tries of the name fail as held.
	if _, err := ba.Acquire(testCtx(t), key, driver.AcquireOptions{TTL: ghostTTL}); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("A's try while its clean-up is pending: %v, want ErrNotAcquired", err)
	}
	p.Heal()
	return id
}

// noGhost checks that C gets key within 2 TTLs, although A's session, of
// lease id, lives on (its keep-alive alone would keep a forgotten key
// forever), and that A can take it again afterwards.
func noGhost(t *testing.T, admin *clientv3.Client, ba, bc *etcdlock.Backend, key string, id clientv3.LeaseID) {
	t.Helper()
	ctx := testCtx(t)
	for end := time.Now().Add(2 * ghostTTL); ; time.Sleep(100 * time.Millisecond) {
		lc, err := bc.Acquire(ctx, key, driver.AcquireOptions{TTL: ghostTTL})
		if err == nil {
			if err := lc.Release(ctx); err != nil {
				t.Fatal(err)
			}
			break
		}
		if !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatal(err)
		}
		if time.Now().After(end) {
			kvs := keysUnder(t, admin, etcdlock.LockName(etcdlock.DefaultPrefix, key))
			t.Fatalf("A's acquire failed, yet %v later %q is still held by %d key(s) of A's live session (lease %x)",
				2*ghostTTL, key, len(kvs), kvs[0].Lease)
		}
	}
	if etcdlock.SessionLease(ba, ghostTTL) != id {
		t.Errorf("A's session of lease %x ended: the test proves nothing", int64(id))
	}
	la := acquireUncut(t, ctx, ba, key)
	if err := la.Release(ctx); err != nil && !errors.Is(err, distlock.ErrUnavailable) {
		t.Error(err)
	}
}

// An acquire whose key-creating Txn took effect but whose reply was lost,
// and whose clean-up could not reach etcd either, must not leave behind a
// lock that A's session keeps alive and nobody holds: backend.go's rule
// that a failed Acquire leaves no grant behind.
func TestLostTryReplyLeavesNoGhostLock(t *testing.T) {
	for _, wait := range []bool{false, true} {
		name := map[bool]string{false: "Try", true: "Wait"}[wait]
		t.Run(name, func(t *testing.T) {
			p, admin, ba, bc, tries := cutOff(t)
			key := "ghost-" + name
			tries.LoseNextReply(p.Blackhole)
			_, err := ba.Acquire(testCtx(t), key, driver.AcquireOptions{TTL: ghostTTL, Wait: wait})
			if !errors.Is(err, distlock.ErrUnavailable) {
				p.Heal()
				t.Fatalf("A's acquire through the lost reply: %v, want ErrUnavailable", err)
			}
			t.Logf("A's acquire failed: %v", err)
			id := ghost(t, p, admin, ba, key)
			noGhost(t, admin, ba, bc, key, id)
		})
	}
}

// A release that cannot reach etcd fails, and the Client stops renewing;
// the key must not stay behind, kept alive by the session.
func TestFailedReleaseLeavesNoGhostLock(t *testing.T) {
	p, admin, ba, bc, _ := cutOff(t)
	ctx := testCtx(t)
	const key = "ghost-release"
	l := acquireUncut(t, ctx, ba, key)
	p.Blackhole()
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrUnavailable) {
		p.Heal()
		t.Fatalf("Release while cut off: %v, want ErrUnavailable", err)
	}
	id := ghost(t, p, admin, ba, key)
	noGhost(t, admin, ba, bc, key, id)
	// The release went through in the background: a retry by the caller
	// is told so.
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release retried after the clean-up: %v, want nil", err)
	}
}

// A clean-up that cannot reach etcd ends with Close, without leaking its
// goroutine (TestMain checks), and Close returns.
func TestPendingCleanupEndsWithClose(t *testing.T) {
	p, admin, ba, _, tries := cutOff(t)
	const key = "ghost-close"
	tries.LoseNextReply(p.Blackhole)
	if _, err := ba.Acquire(testCtx(t), key, driver.AcquireOptions{TTL: ghostTTL}); !errors.Is(err, distlock.ErrUnavailable) {
		p.Heal()
		t.Fatalf("A's acquire through the lost reply: %v, want ErrUnavailable", err)
	}
	defer p.Heal()
	closed := make(chan error, 1)
	go func() { closed <- ba.Close() }()
	select {
	case err := <-closed:
		// The revoke could not reach etcd either: the lease, and the key
		// with it, expire after the TTL.
		t.Logf("Close while cut off: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return while a clean-up was pending")
	}
	p.Heal()
	if kvs := keysUnder(t, admin, etcdlock.LockName(etcdlock.DefaultPrefix, key)); len(kvs) > 1 {
		t.Errorf("%d keys under %q", len(kvs), key)
	}
}
