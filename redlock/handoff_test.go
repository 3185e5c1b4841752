package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/redlock"
	"github.com/distlock/distlock/testserver"
)

// queueKey is the Redis key of the queue of waiters of key, per the
// documented layout.
func queueKey(key string) string { return redlock.DefaultPrefix + redislock.HashTag(key) + ":waiters" }

// longHold is a TTL long enough that no waiter's fallback timer (the
// holder's remaining TTL) fires during a test: a waiter that gets the
// lock in time was woken by a release.
const longHold = 2 * time.Minute

// waitOpts are the options of a waiting Acquire that holds for longHold.
func waitOpts(owner string) driver.AcquireOptions {
	return driver.AcquireOptions{TTL: longHold, Wait: true, Owner: owner}
}

// evalshaCalls is how many scripts s has run since its stats were reset:
// one per request of the package.
func evalshaCalls(t *testing.T, s *testserver.Redis) int {
	t.Helper()
	calls, _ := commandCalls(t, s)
	return calls["evalsha"]
}

// subscribedClients is how many of s's clients are subscribed to a
// channel (one per waiting Backend).
func subscribedClients(t *testing.T, s *testserver.Redis) int {
	t.Helper()
	v, err := s.Do("CLIENT", "LIST")
	if err != nil {
		t.Fatalf("CLIENT LIST: %v", err)
	}
	text, _ := v.(string)
	n := 0
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, " sub=") && !strings.Contains(line, " sub=0 ") {
			n++
		}
	}
	return n
}

func zcard(t *testing.T, s *testserver.Redis, key string) int64 {
	t.Helper()
	v, err := s.Do("ZCARD", key)
	if err != nil {
		t.Fatalf("ZCARD: %v", err)
	}
	n, _ := v.(int64)
	return n
}

// A release wakes one waiter, not all of them: with 16 waiters (each its
// own Backend, as processes are) queued behind a holder, the 16 hand-offs
// that follow its release cost each node about two requests per grant
// (the release and the woken waiter's try), where waking every waiter
// costs a try per waiter still waiting, about 10 per grant here. The
// holder's TTL is long enough that no fallback timer fires: every
// hand-off is a release's wake-up.
func TestHandoffWakesOneWaiter(t *testing.T) {
	const waiters = 16
	srvs := startNodes(t, 3)
	holder := newBackend(t, addrs(srvs))
	ctx := testCtx(t)
	const key = "handoff"
	held, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: longHold, Owner: "holder"})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	for _, s := range srvs {
		if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatalf("CONFIG RESETSTAT: %v", err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	for range waiters {
		b := newBackend(t, addrs(srvs))
		wg.Go(func() {
			l, err := b.Acquire(ctx, key, waitOpts("waiter"))
			if err == nil {
				err = l.Release(ctx)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	// Every waiter has subscribed and tried twice (its first try, and the
	// one once subscribed, which queues it): they all wait for a release.
	eventually(t, 30*time.Second, "every waiter waiting", func() bool {
		for _, s := range srvs {
			if subscribedClients(t, s) < waiters || evalshaCalls(t, s) < 2*waiters {
				return false
			}
		}
		return true
	})
	for _, s := range srvs {
		if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
			t.Fatalf("CONFIG RESETSTAT: %v", err)
		}
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("waiter: %v", err)
	}
	// 16 releases and 16 granted tries; a woken waiter that loses a race
	// tries again. Three requests per grant leave room for that.
	for i, s := range srvs {
		n := evalshaCalls(t, s)
		t.Logf("node %d: %d requests for %d grants", i+1, n, waiters)
		if n > 3*waiters {
			t.Errorf("node %d: %d requests for %d hand-offs (%.1f per grant), want at most 3 per grant: a release wakes more than one waiter",
				i+1, n, waiters, float64(n)/waiters)
		}
		if q := zcard(t, s, queueKey(key)); q != 0 {
			t.Errorf("node %d: %d waiters left in the queue after every waiter was served", i+1, q)
		}
	}
}

// A waiter whose process died (its connections closed, as the kernel
// closes a killed process's) does not hold the queue up: the release that
// would have woken it finds nobody listening, drops it and wakes the next
// waiter, at once. Without that the next waiter would wait for its
// fallback timer, the holder's TTL (longer than this test's context).
func TestDeadWaiterIsSkipped(t *testing.T) {
	srvs := startNodes(t, 3)
	holder := newBackend(t, addrs(srvs))
	ctx := testCtx(t)
	const key = "dead-waiter"
	held, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: longHold, Owner: "holder"})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	queued := func(n int64) func() bool {
		return func() bool {
			for _, s := range srvs {
				if zcard(t, s, queueKey(key)) != n {
					return false
				}
			}
			return true
		}
	}
	// The dead waiter queues first: it is first in line on every node.
	dead := newBackend(t, addrs(srvs))
	deadErr := make(chan error, 1)
	go func() {
		_, err := dead.Acquire(ctx, key, waitOpts("dead"))
		deadErr <- err
	}()
	eventually(t, 30*time.Second, "the first waiter queued on every node", queued(1))
	live := newBackend(t, addrs(srvs))
	liveCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		l, err := live.Acquire(liveCtx, key, waitOpts("live"))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 30*time.Second, "both waiters queued on every node", queued(2))
	if err := dead.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-deadErr; !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("the closed Backend's Acquire returned %v, want ErrClosed", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the live waiter, behind a dead one: %v (a release must skip a waiter nobody listens for)", err)
	}
	if !queued(0)() {
		t.Errorf("waiters left in the queue after the live one was served")
	}
}

// A waiter whose context ends leaves the queue on every node, so that no
// release wakes it in vain.
func TestGivenUpWaiterLeavesQueue(t *testing.T) {
	srvs := startNodes(t, 3)
	holder := newBackend(t, addrs(srvs))
	ctx := testCtx(t)
	const key = "given-up"
	if _, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: longHold, Owner: "holder"}); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	b := newBackend(t, addrs(srvs))
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := b.Acquire(wctx, key, waitOpts("waiter"))
		done <- err
	}()
	inQueue := func(want int64) func() bool {
		return func() bool {
			for _, s := range srvs {
				if zcard(t, s, queueKey(key)) != want {
					return false
				}
			}
			return true
		}
	}
	eventually(t, 30*time.Second, "the waiter queued on every node", inQueue(1))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v, want context.Canceled", err)
	}
	eventually(t, 30*time.Second, "the waiter gone from every node's queue", inQueue(0))
}
