package zklock_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

// A holder cut off from the ensemble until its session expires: its lock
// is reported lost (by Err, exact on the local clock, at the end of the
// safe window, before the session timeout) before the waiter is granted
// the lock, which happens when the ensemble expires the session, and its
// context ends soon after. Once the holder's connection comes back, the expiry
// is reported through OnLost, and a new session serves the next acquire.
func TestSessionExpiryEndsHolderFirst(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	ctx := testCtx(t)
	key := "session/" + t.Name()
	p := faultproxy.Start(t, z.Servers[0])
	hb := newBackendTimeout(t, []string{p.Addr()}, shortSession)
	holder := newClient(t, hb, distlock.WithTTL(shortSession), distlock.WithSafetyMargin(shortSession/10))
	la, err := holder.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	lost := make(chan error, 1)
	raw, err := hb.Acquire(ctx, key+"/raw", driver.AcquireOptions{TTL: shortSession, OnLost: func(err error) { lost <- err }})
	if err != nil {
		t.Fatalf("raw Acquire: %v", err)
	}
	sid := hb.Conn().SessionID()

	waiter := newClient(t, newBackend(t, z.Servers))
	type result struct {
		l    *distlock.Lock
		err  error
		hErr error // the holder's Err when the waiter's Acquire returned
	}
	granted := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key)
		granted <- result{l, err, la.Err()}
	}()
	waitNodes(t, adminConn(t, z.Servers), key, 2)

	p.Blackhole()
	cut := time.Now()
	var r result
	select {
	case r = <-granted:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter was not granted the lock after the holder's session expired")
	}
	if r.err != nil {
		t.Fatalf("waiter Acquire: %v", r.err)
	}
	// Judged by the local clock, as distlocktest does: Err is exact, and
	// the context's cancellation follows when the watchdog runs.
	if !errors.Is(r.hErr, distlock.ErrLockLost) {
		t.Fatalf("the waiter was granted the lock %v after the cut while the holder lived: Err() = %v, want ErrLockLost", time.Since(cut), r.hErr)
	}
	select {
	case <-la.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the holder's context lived 30s after its loss")
	}
	if r.l.Token() <= la.Token() {
		t.Errorf("token %d granted after %d", r.l.Token(), la.Token())
	}

	p.Heal()
	select {
	case err := <-lost:
		if !errors.Is(err, distlock.ErrLockLost) || !errors.Is(err, zklock.ErrSessionLost) {
			t.Errorf("OnLost(%v), want ErrLockLost and ErrSessionLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the session's expiry was not reported through OnLost")
	}
	if _, err := raw.Refresh(ctx, shortSession); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Refresh after the expiry: %v, want ErrLockLost", err)
	}
	l2, err := holder.Acquire(ctx, key+"/next")
	if err != nil {
		t.Fatalf("Acquire after the expiry: %v", err)
	}
	if got := hb.Conn().SessionID(); got == sid {
		t.Errorf("still session %#x after its expiry", sid)
	}
	// Its validity is 5/12 of a 2s session: a loaded machine may see it
	// lapse before this Release, which then reports the loss.
	if err := l2.Release(ctx); err != nil && !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release: %v", err)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Errorf("waiter Release: %v", err)
	}
}

// newClient returns a distlock Client over b, closed when the test ends.
func newClient(t testing.TB, b driver.Backend, opts ...distlock.Option) *distlock.Client {
	t.Helper()
	c, err := distlock.New(b, opts...)
	if err != nil {
		t.Fatalf("distlock.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := testCtxFor(30 * time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// A waiter cut off until its session expires gets an error matching
// distlock.ErrUnavailable and ErrSessionLost once its connection is back,
// never the lock, although the holder released while it was away (its node
// was then first, until the ensemble expired the session).
func TestWaiterSessionExpiry(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "session/" + t.Name()
	hl, err := newBackend(t, z.Servers).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	p := faultproxy.Start(t, z.Servers[0])
	wb := newBackendTimeout(t, []string{p.Addr()}, shortSession)
	done := make(chan error, 1)
	go func() {
		l, err := wb.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			l.Release(ctx)
		}
		done <- err
	}()
	waitNodes(t, admin, key, 2)
	waitWatches(t, z, 1) // the waiter's on the holder's node
	p.Blackhole()
	if err := hl.Release(ctx); err != nil {
		t.Fatalf("holder Release: %v", err)
	}
	waitNodes(t, admin, key, 0) // the waiter's session expired
	p.Heal()
	select {
	case err := <-done:
		if !errors.Is(err, distlock.ErrUnavailable) || !errors.Is(err, zklock.ErrSessionLost) {
			t.Fatalf("waiter Acquire: %v, want ErrUnavailable and ErrSessionLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not return after its session expired")
	}
}

// Before reporting a grant, the Backend checks that the node the listing
// showed first is owned by its current session: a session that ended
// between the listing and the grant (here the waiter is cut off, between
// them, until the ensemble expires its session and deletes the node, then
// reconnects with a new session) leaves a node that holds nothing. The
// acquire fails with ErrSessionLost, and is never granted a lock whose
// node is gone or another session's.
func TestGrantChecksTheNodeIsOurs(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "session/" + t.Name()
	hl, err := newBackend(t, z.Servers).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	p := faultproxy.Start(t, z.Servers[0])
	b := newBackendTimeout(t, []string{p.Addr()}, shortSession)
	var expired atomic.Bool
	b.SetBeforeGrant(func(node string) {
		if expired.Swap(true) {
			return
		}
		sid := b.Conn().SessionID()
		p.Blackhole()
		deadline := time.Now().Add(time.Minute)
		for {
			ok, _, err := admin.Exists(node)
			if err == nil && !ok {
				break // the ensemble expired the session
			}
			if time.Now().After(deadline) {
				t.Errorf("%s still there a minute after its session was cut off", node)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		p.Heal()
		// The zk client reports the expiry before it has a new session id.
		for id := b.Conn().SessionID(); id == sid || id == 0; id = b.Conn().SessionID() {
			if time.Now().After(deadline) {
				t.Errorf("no new session after the expiry of %#x", sid)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	done := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			err = fmt.Errorf("granted with the node %s of an expired session", l.(interface{ Path() string }).Path())
			l.Release(ctx)
		}
		done <- err
	}()
	waitNodes(t, admin, key, 2)
	if err := hl.Release(ctx); err != nil {
		t.Fatalf("holder Release: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, distlock.ErrUnavailable) || !errors.Is(err, zklock.ErrSessionLost) {
			t.Fatalf("Acquire: %v, want ErrUnavailable and ErrSessionLost", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the acquire did not return")
	}
	if !expired.Load() {
		t.Fatal("the grant was not checked")
	}
}

// A grant's and a refresh's validity is 5/12 of the session timeout the
// ensemble granted (shortSession, 2s, within the test servers' 0.4s–4s):
// the leader hears of a follower's clients up to half a tick (at most a
// quarter of the timeout) and one zk client ping (a third) late, which
// the validity allows for (see Guarantees).
func TestValidityAllowsForTheLeadersLag(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	ctx := testCtx(t)
	l, err := newBackendTimeout(t, z.Servers, shortSession).Acquire(ctx, "validity", driver.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := shortSession - shortSession/4 - shortSession/3
	if got := l.Validity().TTL; got != want {
		t.Errorf("grant's validity %v, want %v (5/12 of the session timeout %v)", got, want, shortSession)
	}
	v, err := l.Refresh(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v.TTL != want {
		t.Errorf("refresh's validity %v, want %v", v.TTL, want)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
