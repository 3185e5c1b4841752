package distlocktest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Contract: mutual exclusion while the lease is valid; tokens strictly
// increase per key (many clients, many goroutines, one key).
func (s *suite) testMutexOneKey(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	const clients, workers, rounds = 3, 4, 8
	var cs critical
	var wg sync.WaitGroup
	for range clients {
		c := s.client(t)
		for range workers {
			wg.Go(func() {
				for range rounds {
					l, err := c.Acquire(ctx, key)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					cs.enter(t, l)
					time.Sleep(time.Millisecond) // widen the section
					cs.leave(t, l)
					if err := l.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	if got, want := len(cs.tokens), clients*workers*rounds; got != want {
		t.Errorf("%d grants, want %d", got, want)
	}
	checkIncreasing(t, key, cs.tokens)
}

// Contract: mutual exclusion per key, with many keys at once.
func (s *suite) testMutexManyKeys(t *testing.T) {
	ctx := s.ctx(t)
	const nkeys, clients, workers, rounds = 6, 2, 8, 12
	keys := make([]string, nkeys)
	sections := make([]critical, nkeys)
	for i := range keys {
		keys[i] = s.key(t)
	}
	var wg sync.WaitGroup
	for range clients {
		c := s.client(t)
		for range workers {
			wg.Go(func() {
				for range rounds {
					i := rand.IntN(nkeys)
					l, err := c.Acquire(ctx, keys[i])
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					sections[i].enter(t, l)
					time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
					sections[i].leave(t, l)
					if err := l.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	for i := range keys {
		checkIncreasing(t, keys[i], sections[i].tokens)
	}
}

// Contract: a token is unique per grant and greater than every earlier one
// for the key, across release, expiry and loss, whoever the holder.
func (s *suite) testTokens(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	a, b := s.client(t), s.client(t)
	var tokens []uint64

	la := mustAcquire(t, a, ctx, key) // released
	tokens = append(tokens, la.Token())
	mustRelease(t, la)

	lb := mustAcquire(t, b, ctx, key)
	tokens = append(tokens, lb.Token())
	mustRelease(t, lb)

	// Expiry: a holder that does not renew lapses; the next grant is higher.
	if s.canLapse() {
		la = mustAcquire(t, a, ctx, key, distlock.WithTTL(s.ttl), distlock.WithRenewal(distlock.NoRenewal))
		tokens = append(tokens, la.Token())
		if s.unbounded {
			s.revoke(t, key)
		}
		wctx, cancel := context.WithTimeout(ctx, s.lapse())
		defer cancel()
		lb = mustAcquire(t, b, wctx, key)
		tokens = append(tokens, lb.Token())
		if err := la.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
			t.Errorf("Release after expiry: %v, want ErrLockLost", err)
		}
	} else {
		lb = mustAcquire(t, b, ctx, key)
		tokens = append(tokens, lb.Token())
	}

	// Loss reported by the service.
	if s.revoke != nil {
		s.revoke(t, key)
		waitDone(t, lb.Done(), s.lapse(), "holder after revoke")
	}
	mustRelease2(t, lb)
	la = mustAcquire(t, a, ctx, key)
	tokens = append(tokens, la.Token())
	mustRelease(t, la)
	checkIncreasing(t, key, tokens)
}

// mustRelease2 releases a lock that may have been lost.
func mustRelease2(t *testing.T, l *distlock.Lock) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil && !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("Release(%q): %v", l.Key(), err)
	}
}

// lapseLease makes a raw lease on key lapse at the service: by revoking it,
// or by waiting (through a blocking acquire by b) for its TTL to pass. It
// returns the lease b then holds.
func (s *suite) lapseLease(t *testing.T, ctx context.Context, b driver.Backend, key string) driver.Lease {
	t.Helper()
	if s.revoke != nil {
		s.revoke(t, key)
	}
	wctx, cancel := context.WithTimeout(ctx, s.lapse())
	defer cancel()
	lb, err := b.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("second holder's Acquire after the first lapsed: %v", err)
	}
	return lb
}

// Contract: owner-checked release and refresh. The guide's trap: a holder
// whose lease expired deletes or extends the next holder's lock.
func (s *suite) testOwnerChecked(t *testing.T) {
	s.needLapse(t)
	ctx, key := s.ctx(t), s.key(t)
	ba, bb, bc := s.newBackend(t), s.newBackend(t), s.newBackend(t)
	la, err := ba.Acquire(ctx, key, driver.AcquireOptions{TTL: s.ttl})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	lb := s.lapseLease(t, ctx, bb, key)
	if lb.Token() <= la.Token() {
		t.Errorf("second token %d not above first %d", lb.Token(), la.Token())
	}
	if _, err := la.Refresh(ctx, time.Minute); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("expired holder's Refresh: %v, want ErrLockLost", err)
	}
	if err := la.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("expired holder's Release: %v, want ErrLockLost", err)
	}
	// The second holder still holds: a third cannot get in.
	if l, err := bc.Acquire(ctx, key, driver.AcquireOptions{TTL: s.ttl}); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("third Acquire after the expired holder's release: %v, want ErrNotAcquired", err)
	}
	if _, err := lb.Refresh(ctx, time.Minute); err != nil {
		t.Errorf("second holder's Refresh: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Errorf("second holder's Release: %v", err)
	}
	if err := lb.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("second Release of a released lease: %v, want ErrLockLost", err)
	}
}

// Contract: release after expiry reports that the lock had been lost, and
// does not touch the next holder.
func (s *suite) testClientReleaseAfterLoss(t *testing.T) {
	s.needLapse(t)
	ctx, key := s.ctx(t), s.key(t)
	a, b := s.client(t, distlock.WithTTL(s.ttl), distlock.WithRenewal(distlock.NoRenewal)), s.client(t)
	la := mustAcquire(t, a, ctx, key)
	if s.unbounded {
		s.revoke(t, key)
	}
	wctx, cancel := context.WithTimeout(ctx, s.lapse())
	defer cancel()
	lb := mustAcquire(t, b, wctx, key)
	if err := la.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release of a lapsed lock: %v, want ErrLockLost", err)
	}
	s.assertHeld(t, ctx, key)
	if err := lb.Refresh(ctx); err != nil {
		t.Errorf("next holder's Refresh: %v", err)
	}
	mustRelease(t, lb)
}

// lossBeforeGrant checks, for rounds of a holder that stops being renewed,
// that its context ends before the next holder is granted the key.
func (s *suite) lossBeforeGrant(t *testing.T, holder *distlock.Client, before func(*distlock.Lock)) {
	ctx, key := s.ctx(t), s.key(t)
	if s.unbounded {
		// Grants without a TTL do not lapse for want of renewal: the holder
		// keeps the key, and its context, until it releases or the service
		// reports the grant gone.
		la := mustAcquire(t, holder, ctx, key, distlock.WithTTL(s.ttl))
		if before != nil {
			before(la)
		}
		end := time.Now().Add(2 * s.ttl)
		for time.Now().Before(end) {
			s.assertHeld(t, ctx, key)
			time.Sleep(s.ttl / 4)
		}
		if err := la.Err(); err != nil {
			t.Errorf("a grant without TTL ended: %v", err)
		}
		if d, ok := la.Deadline(); ok {
			t.Errorf("a grant without TTL has a deadline: %v", d)
		}
		mustRelease(t, la)
		return
	}
	next := s.client(t)
	for round := range 3 {
		la := mustAcquire(t, holder, ctx, key, distlock.WithTTL(s.ttl))
		if before != nil {
			before(la)
		}
		wctx, cancel := context.WithTimeout(ctx, s.lapse())
		lb, err := next.Acquire(wctx, key)
		cancel()
		if err != nil {
			t.Fatalf("round %d: next holder's Acquire: %v", round, err)
		}
		// Judged by the local clock, as the contract says: Err is exact
		// when called, and must already report the loss. The context's
		// cancellation follows when the watchdog runs, which on a loaded
		// machine can be after this goroutine saw the next grant.
		if err := la.Err(); !errors.Is(err, distlock.ErrLockLost) {
			t.Fatalf("round %d: key granted to the next holder (token %d) while the first holder's Err was %v, want ErrLockLost", round, lb.Token(), err)
		}
		waitDone(t, la.Done(), s.lapse(), fmt.Sprintf("round %d: first holder's context after its loss", round))
		if lb.Token() <= la.Token() {
			t.Errorf("round %d: token %d after %d", round, lb.Token(), la.Token())
		}
		mustRelease2(t, la)
		mustRelease(t, lb)
	}
}

// Contract: loss is visible and early. A holder that stops renewing has its
// lock reported lost (by Err, exact on the local clock) before any other
// client is granted the key, and its context cancelled.
func (s *suite) testLossNoRenewal(t *testing.T) {
	s.lossBeforeGrant(t, s.client(t, distlock.WithRenewal(distlock.NoRenewal)), nil)
}

// Contract: loss is visible and early, when the holder cannot reach the
// service to renew.
func (s *suite) testLossPartition(t *testing.T) {
	f := NewFaulty(s.newBackend(t))
	s.lossBeforeGrant(t, s.clientOver(t, f), func(*distlock.Lock) { f.Partition() })
	if f.Refused() == 0 && !s.unbounded {
		t.Errorf("the partition refused no refresh: the fault did not bite")
	}
	f.Heal()
}

// Contract: when the service drops a grant, the holder's context ends and
// Err says the lock was lost.
func (s *suite) testLossRevoked(t *testing.T) {
	if s.revoke == nil {
		t.Skip("the backend gave no way to revoke a grant (WithRevoke)")
	}
	ctx, key := s.ctx(t), s.key(t)
	c := s.client(t, distlock.WithTTL(s.ttl))
	l := mustAcquire(t, c, ctx, key)
	s.revoke(t, key)
	waitDone(t, l.Done(), s.lapse(), "holder after revoke")
	if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Err() = %v, want ErrLockLost", err)
	}
	if err := l.Refresh(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Refresh after loss: %v, want ErrLockLost", err)
	}
	mustRelease2(t, l)
}

// MaxHold ends a lock that is held too long, and gives the key back (long
// before its TTL would have freed it).
func (s *suite) testMaxHold(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	c := s.client(t, distlock.WithTTL(2*time.Minute))
	l := mustAcquire(t, c, ctx, key, distlock.WithMaxHold(s.ttl/2))
	waitDone(t, l.Done(), s.lapse(), "lock past MaxHold")
	if err := l.Err(); !errors.Is(err, distlock.ErrMaxHoldExceeded) || !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Err() = %v, want ErrMaxHoldExceeded", err)
	}
	// The release runs in the background: the key must be free soon.
	other := s.client(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		l2, err := other.TryAcquire(ctx, key)
		if err == nil {
			mustRelease(t, l2)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("key still held 10s after MaxHold ended the lock: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mustRelease2(t, l)
}

// Contract: renewal keeps a lock past its TTL, and nobody else gets it.
//
// A renewal is only as timely as the machine lets it be: a stall of the
// test process or of the service longer than the TTL less the renewal
// interval ends the lock, and ending it is then the contract, not a
// defect. So a hold that ends is tried again, up to renewalHolds times,
// and the test fails only if every hold ends: a Client that does not
// renew loses every one of them. What may never happen is another client
// taking the key while the holder's Err still reports it live.
func (s *suite) testRenewal(t *testing.T) {
	ctx := s.ctx(t)
	c := s.client(t, distlock.WithTTL(s.ttl))
	for hold := 1; ; hold++ {
		key := s.key(t)
		l := mustAcquire(t, c, ctx, key)
		lost := s.holdPastTTL(t, ctx, l)
		if lost == nil {
			mustRelease(t, l)
			s.assertFree(t, ctx, key)
			return
		}
		l.Release(context.Background())
		if hold == renewalHolds {
			t.Fatalf("renewed lock ended in each of %d holds of 3 TTLs, the last: %v", hold, lost)
		}
		t.Logf("hold %d of 3 TTLs ended (%v); holding again", hold, lost)
	}
}

// renewalHolds is how many holds testRenewal tries before it fails.
const renewalHolds = 3

// holdPastTTL holds l for three TTLs, checking meanwhile that no other
// client can take its key, and returns why the lock ended if it did. It
// fails the test if another client took the key while l's Err reported
// the lock live.
func (s *suite) holdPastTTL(t *testing.T, ctx context.Context, l *distlock.Lock) error {
	t.Helper()
	end := time.Now().Add(3 * s.ttl)
	for time.Now().Before(end) {
		other, err := s.client(t).TryAcquire(ctx, l.Key())
		if err == nil {
			other.Release(ctx)
			lost := l.Err()
			if lost == nil {
				t.Fatalf("TryAcquire(%q) by another client succeeded while the holder's Err() reported the lock live", l.Key())
			}
			return lost
		}
		if !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire(%q): %v; want ErrNotAcquired", l.Key(), err)
		}
		if err := l.Err(); err != nil {
			return err
		}
		time.Sleep(s.ttl / 4) // let time pass: renewal has to happen meanwhile
	}
	d, ok := l.Deadline()
	switch {
	case s.unbounded && ok:
		t.Errorf("Deadline() = %v for a grant without TTL", d)
	case !s.unbounded && (!ok || !d.After(time.Now())):
		if err := l.Err(); err != nil {
			return err
		}
		t.Errorf("Deadline() = %v, %v; want a time in the future", d, ok)
	}
	return nil
}

// Contract: waiting is push-based. A release hands the key to a waiter long
// before the released lease would have expired.
func (s *suite) testReleaseWakesWaiter(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	const ttl = 2 * time.Minute
	a, b := s.client(t, distlock.WithTTL(ttl)), s.client(t, distlock.WithTTL(ttl))
	la := mustAcquire(t, a, ctx, key)
	got := make(chan *distlock.Lock, 1)
	wctx, cancel := context.WithTimeout(ctx, ttl/4)
	defer cancel()
	go func() {
		l, err := b.Acquire(wctx, key)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	// The waiter must not be served while the key is held.
	select {
	case l := <-got:
		t.Fatalf("waiter got the key while it was held (lock %v)", l)
	case <-time.After(100 * time.Millisecond):
	}
	mustRelease(t, la)
	released := time.Now()
	var lb *distlock.Lock
	select {
	case lb = <-got:
	case <-time.After(pushBound):
		t.Fatalf("waiter not served %v after the release (TTL %v): waiting is not push-based", pushBound, ttl)
	}
	t.Logf("waiter served %v after the release", time.Since(released))
	if lb != nil {
		if lb.Token() <= la.Token() {
			t.Errorf("token %d after %d", lb.Token(), la.Token())
		}
		mustRelease(t, lb)
	}
}

// Contract: TryAcquire tries once.
func (s *suite) testTryAcquire(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	a, b := s.client(t), s.client(t)
	la, err := a.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire of a free key: %v", err)
	}
	_, err = b.TryAcquire(ctx, key)
	if !errors.Is(err, distlock.ErrNotAcquired) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryAcquire of a held key: %v, want ErrNotAcquired and no context error", err)
	}
	if _, err := b.Acquire(ctx, key, distlock.WithWait(false)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("Acquire(WithWait(false)) of a held key: %v, want ErrNotAcquired", err)
	}
	mustRelease(t, la)
	lb, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after release: %v", err)
	}
	mustRelease(t, lb)
}

// Contract: context everywhere. Cancellation while waiting returns an error
// matching both ErrNotAcquired and ctx.Err(), and leaves nothing behind.
func (s *suite) testCancelWhileWaiting(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	a, b := s.client(t), s.client(t)
	la := mustAcquire(t, a, ctx, key)

	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := b.Acquire(dctx, key)
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire past its deadline: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}

	cctx, cancel2 := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := b.Acquire(cctx, key)
		errc <- err
	}()
	time.AfterFunc(50*time.Millisecond, cancel2)
	select {
	case err := <-errc:
		if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled Acquire: %v, want ErrNotAcquired and Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cancelled Acquire did not return")
	}

	// An already-cancelled context fails at once, even for a free key.
	done, cancel3 := context.WithCancel(ctx)
	cancel3()
	if _, err := b.Acquire(done, s.key(t)); !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Errorf("Acquire with a cancelled context: %v", err)
	}

	// The waiters that gave up hold nothing.
	mustRelease(t, la)
	s.assertFree(t, ctx, key)
}

// Reentrancy through the lock's context: same token, hold count, depth
// limit, outermost release frees the key.
func (s *suite) testReentrancy(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	c := s.client(t, distlock.WithMaxDepth(3))
	l1 := mustAcquire(t, c, ctx, key)
	l2, err := c.TryAcquire(l1.Context(), key)
	if err != nil {
		t.Fatalf("reentrant TryAcquire: %v", err)
	}
	// A context derived from a lock context counts too.
	dctx, cancel := context.WithCancel(l2.Context())
	defer cancel()
	l3 := mustAcquire(t, c, dctx, key)
	if l2.Token() != l1.Token() || l3.Token() != l1.Token() {
		t.Errorf("reentrant tokens %d, %d; want %d", l2.Token(), l3.Token(), l1.Token())
	}
	if _, err := c.TryAcquire(l3.Context(), key); !errors.Is(err, distlock.ErrTooDeep) {
		t.Errorf("fourth level with MaxDepth 3: %v, want ErrTooDeep", err)
	}
	// Not reentrant: another context of the same client, or another client.
	if _, err := c.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("same client, unrelated context: %v, want ErrNotAcquired", err)
	}
	if _, err := s.client(t).TryAcquire(l1.Context(), key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("other client, lock context: %v, want ErrNotAcquired", err)
	}
	mustRelease(t, l1) // the outer handle first: the grant stays
	s.assertHeld(t, ctx, key)
	if l3.Err() != nil {
		t.Errorf("inner handle ended with an outer release: %v", l3.Err())
	}
	mustRelease(t, l3)
	s.assertHeld(t, ctx, key)
	mustRelease(t, l2)
	if !errors.Is(l1.Err(), distlock.ErrReleased) {
		t.Errorf("Err() after the last release = %v, want ErrReleased", l1.Err())
	}
	s.assertFree(t, ctx, key)
	if _, err := c.TryAcquire(l1.Context(), key); err == nil {
		t.Errorf("reentrant acquire through a released lock's context succeeded")
	}
}

// Reentrancy is goroutine-safe.
func (s *suite) testReentrancyConcurrent(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	c := s.client(t, distlock.WithMaxDepth(1000))
	outer := mustAcquire(t, c, ctx, key)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 10 {
				l, err := c.Acquire(outer.Context(), key)
				if err != nil {
					t.Errorf("reentrant Acquire: %v", err)
					return
				}
				if l.Token() != outer.Token() {
					t.Errorf("token %d, want %d", l.Token(), outer.Token())
				}
				if err := l.Release(ctx); err != nil {
					t.Errorf("reentrant Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	s.assertHeld(t, ctx, key)
	mustRelease(t, outer)
	s.assertFree(t, ctx, key)
}

// The guide's transfer example: A->B and B->A at once, many rounds, by
// several clients: AcquireAll never deadlocks, and balances add up.
func (s *suite) testTransfers(t *testing.T) {
	ctx := s.ctx(t)
	acct := []string{s.key(t) + "/A", s.key(t) + "/B"}
	// Read-modify-write with a pause between: without mutual exclusion,
	// updates are lost and the sum drifts. (Atomics keep the race detector
	// quiet; they do not make the update atomic.)
	var balance [2]atomic.Int64
	balance[0].Store(1000)
	balance[1].Store(1000)
	var cs critical
	var wg sync.WaitGroup
	const clients, workers, rounds = 2, 4, 10
	for ci := range clients {
		c := s.client(t)
		for w := range workers {
			fi, ti := (ci+w)%2, (ci+w+1)%2
			from, to := acct[fi], acct[ti]
			wg.Go(func() {
				for range rounds {
					set, err := c.AcquireAll(ctx, []string{from, to})
					if err != nil {
						t.Errorf("AcquireAll(%s, %s): %v", from, to, err)
						return
					}
					cs.inside.Add(1)
					if n := cs.inside.Load(); n != 1 {
						t.Errorf("%d transfers at once", n)
					}
					f, g := balance[fi].Load(), balance[ti].Load()
					time.Sleep(100 * time.Microsecond)
					balance[fi].Store(f - 1)
					balance[ti].Store(g + 1)
					cs.inside.Add(-1)
					if err := set.Release(ctx); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	if sum := balance[0].Load() + balance[1].Load(); sum != 2000 {
		t.Errorf("balances sum to %d, want 2000", sum)
	}
}

// AcquireAll is all or nothing: when one key cannot be had, none is kept.
func (s *suite) testAllOrNothing(t *testing.T) {
	ctx := s.ctx(t)
	k1, k2, k3 := s.key(t)+"/1", s.key(t)+"/2", s.key(t)+"/3"
	other := mustAcquire(t, s.client(t), ctx, k2)
	c := s.client(t)
	if _, err := c.AcquireAll(ctx, []string{k3, k1, k2}, distlock.WithWait(false)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("AcquireAll with one key held: %v, want ErrNotAcquired", err)
	}
	s.assertFree(t, ctx, k1)
	s.assertFree(t, ctx, k3)
	// With a deadline: the whole call is bounded by ctx.
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := c.AcquireAll(dctx, []string{k1, k2, k3}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AcquireAll past its deadline: %v, want DeadlineExceeded", err)
	}
	s.assertFree(t, ctx, k1)
	mustRelease(t, other)

	set, err := c.AcquireAll(ctx, []string{k2, k1, k2, k3, k1})
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	if n := len(set.Locks()); n != 3 {
		t.Errorf("%d locks for 3 distinct keys", n)
	}
	if set.Lock(k2) == nil || set.Lock(k2).Key() != k2 || set.Lock("nope") != nil {
		t.Errorf("LockSet.Lock lookup is wrong")
	}
	// Reentrant through the set's context, on any of its keys.
	l, err := c.TryAcquire(set.Context(), k1)
	if err != nil {
		t.Errorf("reentrant TryAcquire through the set's context: %v", err)
	} else {
		mustRelease(t, l)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for _, k := range []string{k1, k2, k3} {
		s.assertFree(t, ctx, k)
	}
	if _, err := c.AcquireAll(ctx, nil); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("AcquireAll of no keys: %v, want ErrInvalidKey", err)
	}
	if _, err := c.AcquireAll(ctx, []string{k1, ""}); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("AcquireAll with an empty key: %v, want ErrInvalidKey", err)
	}
	s.assertFree(t, ctx, k1)
}

// A LockSet is lost when any of its locks is lost, the first or the last,
// and its Err names that part; the other locks are side by side with it:
// they keep their grants, their Err and their contexts.
//
// The other locks keep theirs only while their renewals are timely: a
// stall of the machine longer than the TTL less the renewal interval,
// while the lost part lapses, ends them too, each by its own deadline, as
// the contract says it must. So a try in which another part ended by its
// deadline is made again, up to renewalHolds times, and the test fails
// only if every try ends so. A set that does not end, an Err that names a
// part still held, or another part ended in any other way fails at once.
func (s *suite) testSetLost(t *testing.T) {
	s.needLapse(t)
	ctx := s.ctx(t)
	for _, part := range []int{0, 2} {
		for try := 1; ; try++ {
			stalled := s.loseSetPart(t, ctx, part)
			if stalled == nil || t.Failed() {
				break
			}
			if try == renewalHolds {
				t.Fatalf("part %d lost: another part ended by its deadline in each of %d tries, the last: %v", part, try, stalled)
			}
			t.Logf("part %d lost, try %d: %v; trying again", part, try, stalled)
		}
	}
}

// loseSetPart acquires a set of three keys, makes the service drop the
// grant of the one at index part, and checks that the set ends, naming a
// lost part, while the other parts live on. It returns why another part
// ended if that part's own deadline passed (the machine stalled its
// renewals), and fails the test for any other breach.
func (s *suite) loseSetPart(t *testing.T, ctx context.Context, part int) (stalled error) {
	keys := []string{s.key(t) + "/1", s.key(t) + "/2", s.key(t) + "/3"}
	f := NewFaulty(s.newBackend(t))
	c := s.clientOver(t, f, distlock.WithTTL(s.ttl))
	set, err := c.AcquireAll(ctx, keys)
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	s.lose(t, f, keys[part])
	waitDone(t, set.Done(), s.lapse(), fmt.Sprintf("set with part %d lost", part))
	ended := map[string]bool{} // the parts whose Err reports them lost
	for i, l := range set.Locks() {
		err := l.Err()
		ended[l.Key()] = errors.Is(err, distlock.ErrLockLost)
		switch {
		case l.Key() == keys[part]:
			if !errors.Is(err, distlock.ErrLockLost) {
				t.Errorf("part %d lost: its Err is %v", part, err)
			}
		case err == nil && l.Context().Err() == nil:
		case errors.Is(err, distlock.ErrDeadlinePassed):
			if stalled == nil {
				stalled = fmt.Errorf("lock %d (%q) ended by its own deadline: %w", i, l.Key(), err)
			}
		default:
			t.Errorf("part %d lost: lock %d ended too: Err %v, context %v", part, i, err, context.Cause(l.Context()))
		}
	}
	var ke *distlock.KeyError
	switch err := set.Err(); {
	case !errors.Is(err, distlock.ErrLockLost) || !errors.As(err, &ke) || !ended[ke.Key]:
		t.Errorf("part %d lost: set Err() = %v, want ErrLockLost naming a part whose Err reports it lost", part, err)
	case ke.Key != keys[part] && stalled == nil:
		t.Errorf("part %d lost: set Err() = %v, want ErrLockLost naming %q", part, err, keys[part])
	}
	if err := set.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("set Release: %v, want ErrLockLost", err)
	}
	f.Heal()
	for _, k := range keys {
		s.assertFree(t, ctx, k)
	}
	return stalled
}

// A lock acquired under another lock's context ends its context when the
// enclosing lock is released, and says so, but keeps its grant until its
// holder releases it.
func (s *suite) testNesting(t *testing.T) {
	ctx := s.ctx(t)
	outerKey, innerKey := s.key(t)+"/outer", s.key(t)+"/inner"
	c := s.client(t)
	outer, err := c.Acquire(ctx, outerKey)
	if err != nil {
		t.Fatalf("Acquire outer: %v", err)
	}
	inner, err := c.Acquire(outer.Context(), innerKey)
	if err != nil {
		t.Fatalf("Acquire inner: %v", err)
	}
	if err := outer.Release(ctx); err != nil {
		t.Fatalf("Release outer: %v", err)
	}
	waitDone(t, inner.Done(), 10*time.Second, "the inner lock's context after the outer release")
	err = inner.Err()
	if e, ok := errors.AsType[*distlock.EnclosingError](err); !ok || e.Key != outerKey || !errors.Is(e.Err, distlock.ErrReleased) ||
		errors.Is(err, distlock.ErrReleased) || errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("inner Err() = %v, want an EnclosingError for the outer release, and neither ErrReleased nor ErrLockLost", err)
	}
	s.assertHeld(t, ctx, innerKey)
	if err := inner.Release(ctx); err != nil {
		t.Errorf("Release inner: %v", err)
	}
	s.assertFree(t, ctx, innerKey)
}

// Do runs fn under the lock, releases after, and reports a loss during fn.
func (s *suite) testDo(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	c := s.client(t)
	boom := errors.New("boom")
	err := c.Do(ctx, key, func(fctx context.Context) error {
		s.assertHeld(t, ctx, key)
		if fctx.Err() != nil {
			t.Errorf("fn's context is done: %v", fctx.Err())
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Errorf("Do: %v, want fn's error", err)
	}
	s.assertFree(t, ctx, key)

	if !s.canLapse() {
		return
	}
	f := NewFaulty(s.newBackend(t))
	cf := s.clientOver(t, f, distlock.WithTTL(s.ttl))
	err = cf.Do(ctx, key, func(fctx context.Context) error {
		s.lose(t, f, key)
		select {
		case <-fctx.Done():
			return nil // fn thinks it finished; Do must still report the loss
		case <-time.After(s.lapse()):
			return errors.New("fn's context was not cancelled on loss")
		}
	})
	if !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Do with a loss during fn: %v, want ErrLockLost", err)
	}
	f.Heal()
}

// Close releases what the Client holds and refuses new work.
func (s *suite) testClose(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	c, err := distlock.New(s.newBackend(t))
	if err != nil {
		t.Fatal(err)
	}
	l := mustAcquire(t, c, ctx, key)
	if _, err := c.Acquire(l.Context(), key); err != nil { // reentrant: two handles
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if l.Err() == nil {
		t.Errorf("lock context live after Close")
	}
	s.assertFree(t, ctx, key)
	if _, err := c.Acquire(ctx, key); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Release after Close: %v, want ErrNotHeld", err)
	}
}

// A Backend's Close ends its waiting acquisitions with an error matching
// ErrClosed, refuses later ones, and can be called again; the Backends of
// other processes go on. (A factory that returns one shared Backend, an
// in-process service, cannot show it here: its package tests its Close.)
func (s *suite) testBackendClose(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	holder, waiter := s.newBackend(t), s.newBackend(t)
	closer, ok := waiter.(io.Closer)
	if !ok {
		t.Fatalf("%T has no Close method", waiter)
	}
	if holder == waiter {
		t.Logf("the factory returns one shared %T: not closed here", waiter)
		return
	}
	long := driver.AcquireOptions{TTL: time.Minute}
	held, err := holder.Acquire(ctx, key, long)
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	defer held.Release(context.WithoutCancel(ctx))
	if _, err := waiter.Acquire(ctx, key, long); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("try of a held key: %v, want ErrNotAcquired", err)
	}

	errc := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			l.Release(ctx)
		}
		errc <- err
	}()
	// The waiter waits for the holder (and so, in most runs, Close finds
	// it waiting rather than not yet started; either way it must end with
	// ErrClosed).
	select {
	case err := <-errc:
		t.Fatalf("Acquire of a held key returned before Close: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := closer.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, distlock.ErrClosed) {
			t.Errorf("waiting Acquire as its Backend closed: %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waiting Acquire did not return after its Backend's Close")
	}
	if _, err := waiter.Acquire(ctx, s.key(t), long); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("Acquire after Close: %v, want ErrClosed", err)
	}
	if err := closer.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Errorf("another Backend's Release after Close: %v", err)
	}
}

// Bad keys get ErrInvalidKey, from every entry point, and nothing is held.
func (s *suite) testBadKeys(t *testing.T) {
	ctx := s.ctx(t)
	c := s.client(t)
	bad := map[string]string{
		"empty":        "",
		"too long":     strings.Repeat("k", distlock.MaxKeyLen+1),
		"NUL":          "a\x00b",
		"newline":      "a\nb",
		"DEL":          "a\x7fb",
		"invalid UTF8": "a\xffb",
	}
	for name, key := range bad {
		if _, err := c.Acquire(ctx, key); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("Acquire(%s): %v, want ErrInvalidKey", name, err)
		}
		if _, err := c.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("TryAcquire(%s): %v, want ErrInvalidKey", name, err)
		}
		if err := c.Do(ctx, key, func(context.Context) error { return nil }); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("Do(%s): %v, want ErrInvalidKey", name, err)
		}
		// A backend called directly refuses them too.
		if l, err := s.newBackend(t).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Second}); err == nil {
			l.Release(ctx)
			t.Errorf("Backend.Acquire(%s) succeeded", name)
		}
	}
}

// Keys with characters some services cannot store are escaped, never merged:
// holding each at once works, and each is really held.
func (s *suite) testOddKeys(t *testing.T) {
	ctx := s.ctx(t)
	base := s.key(t)
	odd := []string{
		"a/b", "a%2Fb", "a%2fb", "a_b", "a:b", "a|b", "a\\b", "a b", "a+b", "a.b",
		"../../etc/passwd", ".", "..", "/", "//", "a/", "/a", "a//b", "*", "?", "[x]",
		"{tag}", "%", "%%", "~", "A", "a", "ключ", "🔒", "キー", "\u00e9", "e\u0301",
		"'quote\"", "$x", "a#b", "lock-0000000001", "-", "_", strings.Repeat("x", distlock.MaxKeyLen-len(base)-1),
	}
	holder, other := s.client(t), s.client(t)
	var held []*distlock.Lock
	for _, k := range odd {
		key := base + "/" + k
		if k == "." || k == ".." || k == "/" {
			key = base + k
		}
		l, err := holder.TryAcquire(ctx, key)
		if err != nil {
			t.Errorf("TryAcquire(%q) with the other odd keys held: %v", key, err)
			continue
		}
		held = append(held, l)
	}
	for _, l := range held {
		if _, err := other.TryAcquire(ctx, l.Key()); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("another client's TryAcquire(%q): %v, want ErrNotAcquired", l.Key(), err)
		}
	}
	for _, l := range held {
		mustRelease(t, l)
	}
	for _, l := range held {
		s.assertFree(t, ctx, l.Key())
	}
}

// Out-of-range options get ErrInvalidOption, from New and per call.
func (s *suite) testBadOptions(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	b := s.newBackend(t)
	bad := map[string]distlock.LockOption{
		"zero TTL":        distlock.WithTTL(0),
		"negative TTL":    distlock.WithTTL(-time.Second),
		"huge TTL":        distlock.WithTTL(distlock.MaxTTL + 1),
		"TTL < margin":    distlock.WithTTL(time.Millisecond),
		"drift 1":         distlock.WithDrift(1),
		"negative drift":  distlock.WithDrift(-0.1),
		"negative margin": distlock.WithSafetyMargin(-1),
		"renew > TTL":     distlock.WithRenewal(time.Hour),
		"negative renew":  distlock.WithRenewal(-2 * time.Second),
		"negative hold":   distlock.WithMaxHold(-1),
		"depth 0":         distlock.WithMaxDepth(0),
	}
	c := s.client(t)
	for name, o := range bad {
		if _, err := distlock.New(b, o); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("New(%s): %v, want ErrInvalidOption", name, err)
		}
		if _, err := c.Acquire(ctx, key, o); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("Acquire(%s): %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := distlock.New(nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("New(nil): %v, want ErrInvalidOption", err)
	}
	if _, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: 0}); err == nil {
		t.Errorf("Backend.Acquire with TTL 0 succeeded")
	}
	s.assertFree(t, ctx, key)
}

// Double release and refresh after the end get clear errors.
func (s *suite) testDoubleRelease(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	c := s.client(t)
	l := mustAcquire(t, c, ctx, key)
	mustRelease(t, l)
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("second Release: %v, want ErrNotHeld", err)
	}
	if err := l.Refresh(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Refresh after Release: %v, want ErrNotHeld", err)
	}
	if _, ok := l.Deadline(); ok {
		t.Errorf("Deadline() ok after Release")
	}

	// After a loss: refresh says lost; release says lost once, then not held.
	if !s.canLapse() {
		return
	}
	lost := mustAcquire(t, s.client(t, distlock.WithTTL(s.ttl), distlock.WithRenewal(distlock.NoRenewal)), ctx, key)
	if s.unbounded {
		s.revoke(t, key)
	}
	waitDone(t, lost.Done(), s.lapse(), "lock without renewal")
	if err := lost.Refresh(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Refresh after loss: %v, want ErrLockLost", err)
	}
	if err := lost.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release after loss: %v, want ErrLockLost", err)
	}
	if err := lost.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("second Release after loss: %v, want ErrNotHeld", err)
	}
	wctx, cancel := context.WithTimeout(ctx, s.lapse())
	defer cancel()
	mustRelease(t, mustAcquire(t, c, wctx, key))
}

// An unreachable service fails in bounded time with ErrUnavailable.
func (s *suite) testUnreachable(t *testing.T) {
	if s.unreachable == nil {
		t.Skip("the backend gave no unreachable configuration (WithUnreachable)")
	}
	ctx, key := s.ctx(t), s.key(t)
	c, err := distlock.New(s.unreachable(t), distlock.WithRetry(distlock.Limit(distlock.ExponentialBackoff(time.Millisecond, 10*time.Millisecond), 2)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = c.Acquire(dctx, key)
	if !errors.Is(err, distlock.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire from an unreachable service: %v, want ErrUnavailable before the deadline", err)
	}
	if err != nil && strings.Contains(fmt.Sprint(err), "panic") {
		t.Errorf("error mentions a panic: %v", err)
	}
}
