package etcdlock_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/testserver"
)

// acquireResult is what an Acquire in a goroutine returned.
type acquireResult struct {
	l   driver.Lease
	err error
}

// acquireAsync runs b.Acquire in a goroutine.
func acquireAsync(ctx context.Context, b driver.Backend, key string, opts driver.AcquireOptions) <-chan acquireResult {
	got := make(chan acquireResult, 1)
	go func() {
		l, err := b.Acquire(ctx, key, opts)
		got <- acquireResult{l, err}
	}()
	return got
}

// A waiter whose watches start at compacted revisions (two writes and a
// compaction before each of its first eight watches: three resyncs, then
// five watches etcd answers with ErrCompacted) reads again each time, is
// not granted while the holder holds, and is granted after its release.
func TestWaitAcrossCompaction(t *testing.T) {
	e := testserver.StartEtcd(t)
	admin := adminClient(t, e.Endpoints)
	ba := newBackend(t, newClient(t, e.Endpoints))
	bb := newBackend(t, newClient(t, e.Endpoints))
	watches := etcdlock.InterceptWatches(bb)
	ctx := testCtx(t)
	var compactions atomic.Int32
	watches.BeforeEach(func() {
		if compactions.Add(1) > 8 {
			return
		}
		for range 2 {
			if _, err := admin.Put(ctx, "unrelated", "x"); err != nil {
				t.Error(err)
			}
		}
		resp, err := admin.Get(ctx, "unrelated")
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := admin.Compact(ctx, resp.Header.Revision); err != nil {
			t.Error(err)
		}
	})
	const key = "compacted-watch"
	opts := driver.AcquireOptions{TTL: 10 * time.Second, Wait: true}
	la, err := ba.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := acquireAsync(ctx, bb, key, opts)
	deadline := time.After(30 * time.Second)
	for compactions.Load() < 9 {
		select {
		case <-deadline:
			t.Fatalf("B opened %d watches in 30s, want 9", compactions.Load())
		case r := <-got:
			t.Fatalf("B's acquire ended while A holds: %v %v", r.l, r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case r := <-got:
		t.Fatalf("B's acquire ended while A holds: %v %v", r.l, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.l.Release(ctx)
}

// A waiter's connection reset while it waits, and the release made while
// it was cut off: the watch resumes, and the waiter gets the lock.
//
// The resets start once etcd has registered the waiter's watch, which the
// waiter opens only after the reply of the transaction that creates its
// key: its key showing in etcd is not enough, as that reply may still be
// on its way then, and a reset that cuts it leaves the acquire not knowing
// whether its key exists. The Backend then cleans the key up and answers
// ErrUnavailable, which the Client retries: an acquire that failed, not a
// waiter that gave up.
func TestWaitAcrossConnectionReset(t *testing.T) {
	e := testserver.StartEtcd(t)
	p := faultproxy.Start(t, e.Members[0].ClientAddr)
	ba := newBackend(t, newClient(t, e.Endpoints))
	bb := newBackend(t, newClient(t, []string{p.Addr()}))
	ctx := testCtx(t)
	const key = "reset-watch"
	opts := driver.AcquireOptions{TTL: 10 * time.Second, Wait: true}
	la, err := ba.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminClient(t, e.Endpoints)
	name := etcdlock.LockName(etcdlock.DefaultPrefix, key)
	base := watcherCount(t, e)
	got := acquireAsync(ctx, bb, key, opts)
	waitWatchersAbove(t, e, base, got)
	waitKeys(t, admin, name, 2)
	for range 3 {
		p.Reset()
		select {
		case r := <-got:
			t.Fatalf("B's acquire ended while A holds: %v %v", r.l, r.err)
		case <-time.After(300 * time.Millisecond):
		}
	}
	p.Blackhole()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	p.Heal()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.l.Release(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("B not granted after the release")
	}
}

// A permit's waiter, as a lock's, waits across resets of its connection
// (from when etcd has registered its watch, as above) and gets the permit
// given back while it was cut off.
func TestPermitWaitAcrossConnectionReset(t *testing.T) {
	e := testserver.StartEtcd(t)
	p := faultproxy.Start(t, e.Members[0].ClientAddr)
	ba := newBackend(t, newClient(t, e.Endpoints))
	bb := newBackend(t, newClient(t, []string{p.Addr()}))
	ctx := testCtx(t)
	const key = "reset-permit"
	sem := driver.Semaphore{Limit: 1}
	la, err := ba.AcquirePermit(ctx, key, sem, permitOpts(false))
	if err != nil {
		t.Fatal(err)
	}
	base := watcherCount(t, e)
	got := permitAsync(ctx, bb, key, sem)
	waitWatchersAbove(t, e, base, got)
	waitWaiting(t, ctx, ba, key, 1)
	for range 3 {
		p.Reset()
		select {
		case g := <-got:
			t.Fatalf("B's permit granted or refused while A holds the only one: %v %v", g.l, g.err)
		case <-time.After(300 * time.Millisecond):
		}
	}
	p.Blackhole()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	p.Heal()
	l := expectGrant(t, got, 20*time.Second, "B after the release")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// watcherCount reads etcd's count of its watchers from its metrics.
func watcherCount(t *testing.T, e *testserver.Etcd) int {
	t.Helper()
	resp, err := http.Get(e.Members[0].ClientURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_debugging_mvcc_watcher_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(f)
		}
	}
	t.Fatal("no watcher gauge")
	return 0
}

// waitWatchersAbove waits until etcd counts more than base watchers: a
// waiter's watch is registered. It fails the test if the acquire, whose
// outcome got delivers, ends first.
func waitWatchersAbove[R any](t *testing.T, e *testserver.Etcd, base int, got <-chan R) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for watcherCount(t, e) <= base {
		if time.Now().After(deadline) {
			t.Fatalf("no watch registered in etcd after 30s (%d watchers)", base)
		}
		select {
		case r := <-got:
			t.Fatalf("the acquire ended before it watched: %+v", r)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Waits cancelled at any moment leave no watch in etcd.
func TestCancelledWaitsLeaveNoWatch(t *testing.T) {
	e := testserver.StartEtcd(t)
	ba := newBackend(t, newClient(t, e.Endpoints))
	bb := newBackend(t, newClient(t, e.Endpoints))
	ctx := testCtx(t)
	const key = "cancelled-watch"
	opts := driver.AcquireOptions{TTL: 10 * time.Second, Wait: true}
	la, err := ba.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatal(err)
	}
	base := watcherCount(t, e)
	for i := range 40 {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(i)*time.Millisecond/2)
		_, err := bb.Acquire(wctx, key, opts)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait %d: %v", i, err)
		}
	}
	waitWatchers(t, e, base)
	la.Release(ctx)
}

// waitWatchers waits until etcd counts no more than base watchers: the
// cancellations of watches reach it an instant after the waits return.
func waitWatchers(t *testing.T, e *testserver.Etcd, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := watcherCount(t, e)
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watchers in etcd after cancelled waits, %d before", n, base)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A wait cancelled while etcd's answer to its watch's creation is on its
// way leaves no watch in etcd either. The etcd client cancels a watch in
// etcd only once it knows the watch's id, from that answer: a watch it
// abandons before stays in etcd until an event on its key, here the
// holder's, which holds on.
func TestWaitCancelledBeforeWatchCreatedLeavesNoWatch(t *testing.T) {
	e := testserver.StartEtcd(t)
	p := faultproxy.Start(t, e.Members[0].ClientAddr)
	ba := newBackend(t, newClient(t, e.Endpoints))
	bb := newBackend(t, newClient(t, []string{p.Addr()}))
	watches := etcdlock.InterceptWatches(bb)
	ctx := testCtx(t)
	const key = "cancelled-before-created"
	opts := driver.AcquireOptions{TTL: 10 * time.Second, Wait: true}
	la, err := ba.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatal(err)
	}
	base := watcherCount(t, e)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watches.BeforeEach(func() {
		// The watch's creation reaches etcd 500ms after it is sent, and
		// etcd's answer comes back 500ms later: the wait is cancelled
		// in between.
		p.Delay(500 * time.Millisecond)
		time.AfterFunc(300*time.Millisecond, cancel)
	})
	if _, err := bb.Acquire(wctx, key, opts); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v, want Canceled", err)
	}
	if _, ok := watches.Next(ctx); !ok {
		t.Fatal("the wait opened no watch")
	}
	p.Heal()
	waitWatchers(t, e, base)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Waiters of this package and concurrency.Mutex.Lock, on one name, take
// turns: never two holders at once.
func TestWaitersInterleaveWithMutexLock(t *testing.T) {
	e := testserver.StartEtcd(t)
	ctx := testCtx(t)
	const key = "mixed-waiters"
	name := etcdlock.LockName(etcdlock.DefaultPrefix, key)
	var inside, rounds atomic.Int32
	enter := func(who string) {
		if n := inside.Add(1); n != 1 {
			t.Errorf("%s: %d holders at once", who, n)
		}
		time.Sleep(time.Millisecond)
		inside.Add(-1)
		rounds.Add(1)
	}
	done := make(chan struct{})
	const per = 15
	for i := range 3 {
		b := newBackend(t, newClient(t, e.Endpoints))
		go func() {
			defer func() { done <- struct{}{} }()
			for range per {
				l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: 10 * time.Second, Wait: true})
				if err != nil {
					t.Error(err)
					return
				}
				enter("backend " + strconv.Itoa(i))
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
		cli := newClient(t, e.Endpoints)
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		go func() {
			defer func() { done <- struct{}{} }()
			m := concurrency.NewMutex(s, name)
			for range per {
				if err := m.Lock(ctx); err != nil {
					t.Error(err)
					return
				}
				enter("mutex " + strconv.Itoa(i))
				if err := m.Unlock(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for range 6 {
		<-done
	}
	if n := rounds.Load(); n != 6*per {
		t.Errorf("%d rounds, want %d", n, 6*per)
	}
}
