package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// How locks and sets end: the cause their contexts end with, ends racing
// one another, and releases that a silent service cannot hold up.

// hung wraps a service whose Release (and, with refreshes set, Refresh)
// hangs until its context ends or unblock is closed: a service that
// stopped answering, with a client library that waits on the context.
type hung struct {
	srv       *memlock.Backend // not embedded: its RefreshAll would take hung's leases for its own
	releases  atomic.Bool
	refreshes atomic.Bool
	unblock   chan struct{}
}

func newHung() *hung { return &hung{srv: memlock.New(), unblock: make(chan struct{})} }

type hungLease struct {
	driver.Lease
	h *hung
}

func (h *hung) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	l, err := h.srv.Acquire(ctx, key, o)
	if err != nil {
		return nil, err
	}
	return hungLease{l, h}, nil
}

func (h *hung) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return errors.Join(distlock.ErrUnavailable, ctx.Err())
	case <-h.unblock:
		return nil
	}
}

func (l hungLease) Release(ctx context.Context) error {
	if l.h.releases.Load() {
		if err := l.h.wait(ctx); err != nil {
			return err
		}
	}
	return l.Lease.Release(ctx)
}

func (l hungLease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if l.h.refreshes.Load() {
		if err := l.h.wait(ctx); err != nil {
			return driver.Validity{}, err
		}
	}
	return l.Lease.Refresh(ctx, ttl)
}

// A set whose part is a key its caller's lock already held (reentered):
// when that lock is lost, the set's Err names the part (a KeyError, Op
// "hold"), and its context's cause must say the same.
func TestSetCauseAgreesWithErrForReenteredPart(t *testing.T) {
	inBubble(t, func(t *testing.T, srv *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
		a := acq(t, c, ctx, "a")
		set, err := c.AcquireAll(a.Context(), []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		srv.Revoke("a")
		synctest.Wait()
		err, cause := set.Err(), context.Cause(set.Context())
		ke, ok := errors.AsType[*distlock.KeyError](err)
		if !ok || ke.Op != "hold" || ke.Key != "a" || !errors.Is(err, distlock.ErrLockLost) {
			t.Fatalf("set Err %v, want a KeyError hold a matching ErrLockLost", err)
		}
		if kc, ok := errors.AsType[*distlock.KeyError](cause); !ok || kc.Key != "a" || !errors.Is(cause, distlock.ErrLockLost) {
			t.Errorf("set's context cause %v (%T), but its Err %v", cause, cause, err)
		}
		set.Release(ctx)
		a.Release(ctx)
	})
}

// A set taken under another set's context, reentering the outer set's
// part: when that part is lost, the inner set's cause depends on which of
// its two enders ends it first (map order): sometimes a KeyError naming
// the part, sometimes an EnclosingError. Its Err is always the KeyError.
func TestNestedSetCauseIsDeterministic(t *testing.T) {
	kinds := map[string]int{}
	for range 40 {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			srv := memlock.New()
			c := newClient(t, srv)
			outer, err := c.AcquireAll(ctx, []string{"a", "x"})
			if err != nil {
				t.Fatal(err)
			}
			inner, err := c.AcquireAll(outer.Context(), []string{"a", "y"})
			if err != nil {
				t.Fatal(err)
			}
			srv.Revoke("a")
			synctest.Wait()
			cause := context.Cause(inner.Context())
			if _, ok := errors.AsType[*distlock.EnclosingError](cause); ok {
				kinds["enclosing"]++
			} else {
				kinds["keyerror"]++
			}
			if _, ok := errors.AsType[*distlock.KeyError](inner.Err()); !ok {
				t.Errorf("inner Err %v, want a KeyError", inner.Err())
			}
			inner.Release(ctx)
			outer.Release(ctx)
		})
	}
	if len(kinds) > 1 {
		t.Errorf("one scenario, two causes for the inner set's context: %v", kinds)
	}
}

// Releasing a set's lock on its own ends the set (its Err names the part,
// wrapping ErrReleased), whether the part was freshly acquired or
// reentered from the caller's lock.
func TestSetEndsWhenReenteredPartReleased(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
		a := acq(t, c, ctx, "a")
		set, err := c.AcquireAll(a.Context(), []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		if err := set.Lock("a").Release(ctx); err != nil {
			t.Fatal(err)
		}
		if set.Lock("a").Err() == nil {
			t.Fatal("released part reports no error")
		}
		if err := set.Err(); !errors.Is(err, distlock.ErrReleased) {
			t.Errorf("set Err %v after its lock on a was released, want a KeyError hold a wrapping ErrReleased", err)
		}
		if set.Context().Err() == nil {
			t.Error("set's context live after its lock on a was released")
		}
		set.Release(ctx)
		a.Release(ctx)
	})
}

// Every error AcquireAll returns is a *KeyError (not merely wrapping one).
func TestAcquireAllErrorIsKeyError(t *testing.T) {
	inBubble(t, func(t *testing.T, srv *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
		other := newClient(t, srv)
		b := acq(t, other, ctx, "b")
		_, err := c.AcquireAll(ctx, []string{"a", "b"}, distlock.WithWait(false))
		if !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("AcquireAll: %v, want ErrNotAcquired", err)
		}
		if ke, ok := err.(*distlock.KeyError); !ok || ke.Key != "b" {
			t.Errorf("AcquireAll error is a %T (%v), want a *KeyError naming b", err, err)
		}
		b.Release(ctx)
	})
}

// AcquireAll gives back what it took when a later key fails; a service
// that does not answer must not keep it past the bound that a Release
// through a done context has (the TTL).
func TestAcquireAllFailureReleaseBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := newHung()
		c := newClient(t, h, distlock.WithTTL(time.Second), distlock.WithRetry(distlock.NoRetry))
		other := newClient(t, h.srv)
		b := acq(t, other, ctx, "b")
		h.releases.Store(true)
		var done atomic.Bool
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			c.AcquireAll(wctx, []string{"a", "b"}, distlock.WithWait(false))
			done.Store(true)
		}()
		time.Sleep(time.Minute)
		if !done.Load() {
			t.Error("AcquireAll still giving back a after a minute (ctx 1s, TTL 1s)")
		}
		close(h.unblock)
		synctest.Wait()
		b.Release(ctx)
	})
}

// Do releases its lock when fn returns; a service that does not answer
// must not keep Do past the TTL bound once its ctx is done.
func TestDoReleaseBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHung()
		c := newClient(t, h, distlock.WithTTL(time.Second), distlock.WithRetry(distlock.NoRetry))
		var done atomic.Bool
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c.Do(ctx, "a", func(ctx context.Context) error {
				h.releases.Store(true)
				<-ctx.Done() // fn runs out the caller's time
				return ctx.Err()
			})
			done.Store(true)
		}()
		time.Sleep(time.Minute)
		if !done.Load() {
			t.Error("Do still releasing a minute after its ctx ended (ctx 5s, TTL 1s)")
		}
		close(h.unblock)
		synctest.Wait()
	})
}

// Close ends what the Client does in the background; a renewal in flight
// to a service that does not answer must not hold Close up until the
// lock's deadline.
func TestCloseEndsRefreshInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		h := newHung()
		c, err := distlock.New(h, distlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Acquire(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		h.refreshes.Store(true)
		time.Sleep(25 * time.Second) // the renewal at 20s hangs
		start := time.Now()
		c.Close(ctx)
		if d := time.Since(start); d > time.Second {
			t.Errorf("Close took %v: it waited for the renewal in flight", d)
		}
		close(h.unblock)
	})
}

// A lock lost while its holder releases it: the lock's context ends with
// the loss (as its Err and Release say), never with ErrReleased. The loss
// is recorded under the Client's lock and the context ended after it; a
// Release in between must not end the context first with its own cause.
func TestReleaseRacingLossKeepsLostCause(t *testing.T) {
	const n = 64
	bad := 0
	for range 100 {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			c := newClient(t, memlock.New(), distlock.WithTTL(time.Second), distlock.WithRenewal(distlock.NoRenewal))
			var ls []*distlock.Lock
			for i := range n {
				ls = append(ls, acq(t, c, ctx, string(rune('a'+i%26))+string(rune('a'+i/26))))
			}
			d, _ := ls[0].Deadline()
			errs := make([]error, n)
			done := make(chan struct{})
			go func() {
				defer close(done)
				time.Sleep(time.Until(d)) // wakes with the watchdog, which ends all n at once
				for i := n - 1; i >= 0; i-- {
					errs[i] = ls[i].Release(ctx)
				}
			}()
			<-done
			for i, l := range ls {
				if errors.Is(errs[i], distlock.ErrLockLost) && !errors.Is(context.Cause(l.Context()), distlock.ErrLockLost) {
					if bad++; bad == 1 {
						t.Logf("lock %d: Release %v, but its context's cause %v", i, errs[i], context.Cause(l.Context()))
					}
				}
			}
		})
	}
	if bad > 0 {
		t.Errorf("%d lost locks whose context ended as released", bad)
	}
}

// Releasing a lock whose enclosing lock ends at the same moment: when
// Release returns (the key is back with the service, another client may
// hold it), the lock's context has ended. Ending a scope that another
// goroutine is ending must not return before its context is cancelled.
func TestReleaseRacingEnclosingEndCancelsFirst(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memlock.New())
	live := 0
	for i := range 2000 {
		a := acq(t, c, ctx, "a")
		var bs []*distlock.Lock
		for j := range 8 {
			bs = append(bs, acq(t, c, a.Context(), fmt.Sprint("b", j)))
		}
		ready := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			<-ready
			a.Release(ctx)
		}()
		close(ready)
		for _, b := range bs {
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if b.Context().Err() == nil {
				if live++; live == 1 {
					t.Logf("round %d: %s released, its context still live", i, b.Key())
				}
			}
		}
		<-done
	}
	if live > 0 {
		t.Errorf("%d released locks whose context was still live when Release returned", live)
	}
}

// The same, one level down: when Release of b returns, a lock taken under
// b's context has seen its context end too (work under both stops before
// b is back with the service).
func TestReleaseRacingEnclosingEndEndsKids(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memlock.New())
	live := 0
	for range 2000 {
		a := acq(t, c, ctx, "a")
		var bs, ks []*distlock.Lock
		for j := range 8 {
			b := acq(t, c, a.Context(), fmt.Sprint("b", j))
			bs = append(bs, b)
			ks = append(ks, acq(t, c, b.Context(), fmt.Sprint("k", j)))
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			a.Release(ctx)
		}()
		for j, b := range bs {
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if ks[j].Context().Err() == nil {
				live++
			}
		}
		<-done
		for _, k := range ks {
			k.Release(ctx)
		}
	}
	if live > 0 {
		t.Errorf("%d times a lock's context was live after the lock it was taken under was released", live)
	}
}

// Do's error, when fn succeeded but the lock was lost under it, is the
// *KeyError that Release returned (KeyError's doc: every error Do returns
// is one), not a join of it.
func TestDoLostErrorIsKeyError(t *testing.T) {
	inBubble(t, func(t *testing.T, srv *memlock.Backend, c *distlock.Client) {
		err := c.Do(context.Background(), "a", func(ctx context.Context) error {
			srv.Revoke("a")
			<-ctx.Done()
			return nil
		})
		if !errors.Is(err, distlock.ErrLockLost) {
			t.Fatalf("Do: %v, want ErrLockLost", err)
		}
		if ke, ok := err.(*distlock.KeyError); !ok || ke.Key != "a" {
			t.Errorf("Do's error is a %T (%v), want a *KeyError naming a", err, err)
		}
	})
}
