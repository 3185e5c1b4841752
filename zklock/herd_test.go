package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

// A release wakes exactly one of 32 waiters: each watches only its
// predecessor, so the deletion of the holder's node fires one watch among
// the waiters' sessions.
func TestHerdOneWakeupPerRelease(t *testing.T) {
	const waiters = 32
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "herd/" + t.Name()
	holder := newBackend(t, z.Servers)
	hl, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		i   int
		l   driver.Lease
		err error
	}
	results := make(chan result, waiters)
	bs := make([]*zklock.Backend, waiters)
	for i := range bs {
		bs[i] = newBackend(t, z.Servers)
		// One at a time, so that the queue order is the order of bs.
		go func() {
			l, err := bs[i].Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			results <- result{i, l, err}
		}()
		waitNodes(t, admin, key, i+2)
	}
	// Every waiter watches its predecessor before the release (the holder
	// watches nothing: its loss is told by the session).
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := testserver.FourLetterWord(z.Servers[0], "wchs")
		if err == nil && watchTotal(out) == waiters {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not every waiter watches: wchs %q (%v)", out, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	before := make([]int64, waiters)
	for i, b := range bs {
		before[i] = b.WatchEvents()
	}

	if err := hl.Release(ctx); err != nil {
		t.Fatalf("holder Release: %v", err)
	}
	var first result
	select {
	case first = <-results:
	case <-time.After(30 * time.Second):
		t.Fatal("no waiter was granted the lock after the release")
	}
	if first.err != nil || first.i != 0 {
		t.Fatalf("first grant after the release: waiter %d, %v; want waiter 0", first.i, first.err)
	}
	// A reply on each waiter's session comes after every watch event the
	// server sent that session before it.
	for i, b := range bs {
		if _, err := b.Conn().Sync("/"); err != nil {
			t.Fatalf("sync waiter %d: %v", i, err)
		}
	}
	fired := 0
	for i, b := range bs {
		n := b.WatchEvents() - before[i]
		fired += int(n)
		if n != 0 && i != 0 {
			t.Errorf("waiter %d (not next in line) received %d watch events", i, n)
		}
	}
	if fired != 1 {
		t.Errorf("the release fired %d watches among %d waiters, want 1", fired, waiters)
	}
	select {
	case r := <-results:
		t.Fatalf("waiter %d also returned: %v", r.i, r.err)
	default:
	}
	if err := first.l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	cancel()
	for range waiters - 1 {
		r := <-results
		if r.err == nil {
			r.l.Release(ctx)
			continue
		}
		if !errors.Is(r.err, context.Canceled) {
			t.Errorf("waiter %d: %v, want context.Canceled", r.i, r.err)
		}
	}
}

// watchTotal reads "Total watches:N" from the output of wchs.
func watchTotal(wchs string) int {
	var conns, paths, total int
	fmt.Sscanf(wchs, "%d connections watching %d paths\nTotal watches:%d", &conns, &paths, &total)
	return total
}

// Churn leaves no watch behind: once every lock is released, the server
// holds no watch, including for predecessors that were gone before their
// watcher could watch them (a watch set on a missing node would wait for
// its creation forever).
func TestNoWatchLeftAfterChurn(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	ctx := testCtx(t)
	key := "churn/" + t.Name()
	const backends, rounds = 8, 25
	done := make(chan error, backends)
	for range backends {
		b := newBackend(t, z.Servers)
		go func() {
			for range rounds {
				l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
				if err != nil {
					done <- err
					return
				}
				if err := l.Release(ctx); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range backends {
		if err := <-done; err != nil {
			t.Fatalf("churn: %v", err)
		}
	}
	out, err := testserver.FourLetterWord(z.Servers[0], "wchs")
	if err != nil {
		t.Fatal(err)
	}
	if n := watchTotal(out); n != 0 {
		wchp, _ := testserver.FourLetterWord(z.Servers[0], "wchp")
		t.Errorf("%d watches left after every release:\n%s", n, wchp)
	}
}

// A predecessor that goes between the waiter's listing and its watch is
// seen at once (the waiter lists again and is granted), and the watch
// attempt leaves nothing on the server.
func TestPredecessorGoneBeforeWatch(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "vanish/" + t.Name()
	hl, err := newBackend(t, z.Servers).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	w := newBackend(t, z.Servers)
	var once sync.Once
	w.SetBeforeWatch(func(pred string) {
		once.Do(func() {
			if err := admin.Delete(pred, -1); err != nil {
				t.Errorf("delete the predecessor: %v", err)
			}
		})
	})
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := w.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("waiter Acquire after its predecessor went: %v", err)
	}
	if l.Token() <= hl.Token() {
		t.Errorf("token %d after %d", l.Token(), hl.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := testserver.FourLetterWord(z.Servers[0], "wchs")
		if err == nil && watchTotal(out) == 0 {
			break
		}
		if time.Now().After(deadline) {
			wchp, _ := testserver.FourLetterWord(z.Servers[0], "wchp")
			t.Fatalf("watches left after every node went:\n%s", wchp)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitWatches waits until the server holds n watches in all.
func waitWatches(t testing.TB, z *testserver.ZooKeeper, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := testserver.FourLetterWord(z.Servers[0], "wchs")
		if err == nil && watchTotal(out) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server does not hold %d watches: wchs %q (%v)", n, out, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
