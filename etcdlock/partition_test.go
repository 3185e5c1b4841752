package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/testserver"
)

// A holder cut off from etcd has its lock reported lost by the local
// deadline (Err, exact on the local clock; its context ends soon after)
// before etcd expires its lease and grants the key to another client;
// etcd's own signal, Session.Done, comes only after that deadline.
func TestPartitionedHolderStopsBeforeExpiry(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	p := faultproxy.Start(t, e.Members[0].ClientAddr)
	ctx := testCtx(t)
	const ttl, key = 2 * time.Second, "partitioned"

	cliA := newClient(t, []string{p.Addr()})
	ba := newBackend(t, cliA)
	// A drift of 10% leaves 200ms between the local deadline and the
	// lease's expiry, far more than timer latency.
	ca := newLockClient(t, ba, distlock.WithTTL(ttl), distlock.WithDrift(0.1))
	cb := newLockClient(t, newBackend(t, newClient(t, e.Endpoints)), distlock.WithTTL(ttl))

	la, err := ca.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	sessionDone := etcdlock.SessionDone(ba, ttl)
	id := etcdlock.SessionLease(ba, ttl)
	if sessionDone == nil || id == 0 {
		t.Fatal("no session")
	}
	// Listen to the session's own keep-alive answers, and cut A off right
	// after one: the session's deadline (its last answer + TTL) is then as
	// late as it can be, while A's last confirmation is no later than the
	// cut. Whatever A's timing, etcd's lease expires at least a TTL after
	// A's last confirmation was sent.
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	answers, err := cliA.KeepAlive(kctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-answers:
	case <-time.After(10 * time.Second):
		t.Fatal("no keep-alive answer")
	}
	p.Blackhole()
	cut := time.Now()
	defer p.Heal()
	deadline, _ := la.Deadline() // no refresh is confirmed after the cut

	sessionAt := make(chan time.Time, 1)
	go func() { <-sessionDone; sessionAt <- time.Now() }()
	type grant struct {
		l    *distlock.Lock
		at   time.Time
		err  error
		aErr error // A's Err when B's Acquire returned
	}
	granted := make(chan grant, 1)
	go func() {
		l, err := cb.Acquire(ctx, key)
		granted <- grant{l, time.Now(), err, la.Err()}
	}()

	waitClosed(t, la.Done(), 30*time.Second, "partitioned holder")
	lostAt := time.Now()
	var g grant
	select {
	case g = <-granted:
		if g.err != nil {
			t.Fatalf("B's Acquire: %v", g.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("B was not granted the key after A's lease expired")
	}
	var sessAt time.Time
	select {
	case sessAt = <-sessionAt:
	case <-time.After(30 * time.Second):
		t.Fatal("A's session never noticed")
	}

	t.Logf("after the cut: A's context ended at +%v, B was granted the key at +%v (etcd expired A's lease), A's Session.Done closed at +%v",
		lostAt.Sub(cut).Round(time.Millisecond), g.at.Sub(cut).Round(time.Millisecond), sessAt.Sub(cut).Round(time.Millisecond))
	// Judged by the local clock, as distlocktest does: Err is exact when
	// called, and the context's cancellation, and this goroutine's
	// waking, follow when the machine lets them.
	if !errors.Is(g.aErr, distlock.ErrDeadlinePassed) {
		t.Errorf("B was granted the key while A's Err() was %v, want ErrDeadlinePassed (the local deadline)", g.aErr)
	}
	// The baseline: etcd's own signal had not fired when the local deadline
	// passed; a holder relying on it alone would have gone on working.
	if !sessAt.After(deadline) {
		t.Errorf("Session.Done closed %v before the local deadline: the fault did not bite", deadline.Sub(sessAt))
	}
	if sessAt.After(g.at) {
		t.Logf("baseline: with Session.Done alone, A would have gone on for %v while B held the key", sessAt.Sub(g.at).Round(time.Millisecond))
	}
	if g.l.Token() <= la.Token() {
		t.Errorf("token %d after %d", g.l.Token(), la.Token())
	}

	// A's connection comes back and delivers what it held, A's release
	// included: being owner-checked, it leaves B's lock alone.
	p.Heal()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cliA.Get(rctx, "after-heal"); err != nil {
		t.Fatalf("A's client after the heal: %v", err)
	}
	if err := g.l.Refresh(ctx); err != nil {
		t.Errorf("B's Refresh after A came back: %v", err)
	}
	if kvs := keysUnder(t, admin, etcdlock.LockName(etcdlock.DefaultPrefix, key)); len(kvs) != 1 || uint64(kvs[0].CreateRevision) != g.l.Token() {
		t.Errorf("after A came back, the lock keys are %v; want B's alone", kvs)
	}
	if err := la.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("A's Release: %v, want ErrLockLost", err)
	}
	if err := g.l.Release(ctx); err != nil {
		t.Error(err)
	}
}
