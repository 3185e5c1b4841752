package memlock_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// Waiters for a permit are granted one in arrival order, each as a permit
// is given back, the first alone; a waiter that gives up is passed over,
// and leaves no permit and no stored limit behind.
func TestPermitFIFO(t *testing.T) {
	b := memlock.New()
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sem := driver.Semaphore{Limit: 2}
	opts := driver.AcquireOptions{TTL: time.Minute, Wait: true}
	var held []driver.Lease
	for range sem.Limit {
		l, err := b.AcquirePermit(ctx, "k", sem, opts)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	const n, quitter = 6, 2
	granted := make(chan int, n)
	leases := make([]driver.Lease, n)
	quit, quitCancel := context.WithCancel(ctx)
	defer quitCancel()
	for i := range n {
		wctx := ctx
		if i == quitter {
			wctx = quit
		}
		go func() {
			l, err := b.AcquirePermit(wctx, "k", sem, opts)
			if i == quitter {
				if err == nil {
					t.Errorf("waiter %d granted though it gave up", i)
				}
				granted <- -1
				return
			}
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			leases[i] = l
			granted <- i
		}()
		for memlock.PermitWaiters(b, "k") != i+1 {
			if ctx.Err() != nil {
				t.Fatalf("waiter %d did not queue", i)
			}
			runtime.Gosched()
		}
	}
	quitCancel()
	if got := <-granted; got != -1 {
		t.Fatalf("granted to waiter %d while every permit was held", got)
	}
	next := func() driver.Lease {
		t.Helper()
		if len(held) > 0 {
			l := held[0]
			held = held[1:]
			return l
		}
		return nil
	}
	for want := range n {
		if want == quitter {
			continue
		}
		if err := next().Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The release handed the permit to the first waiter alone.
		if w, left := memlock.PermitWaiters(b, "k"), n-1-want-boolInt(want < quitter); w != left {
			t.Fatalf("%d waiters left after a release; want %d", w, left)
		}
		select {
		case i := <-granted:
			if i != want {
				t.Fatalf("granted to waiter %d, want %d", i, want)
			}
			held = append(held, leases[i])
		case <-ctx.Done():
			t.Fatalf("waiter %d never granted", want)
		}
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := b.Permits(ctx, "k"); err != nil || st.Limit != 0 || len(st.Holders) != 0 || st.Waiting != 0 {
		t.Fatalf("Permits: %+v, %v; want nothing left", st, err)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Close ends the AcquirePermits waiting for a permit with ErrClosed, and
// they leave nothing in line.
func TestCloseEndsPermitWaiters(t *testing.T) {
	b := memlock.New()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sem := driver.Semaphore{Limit: 1}
	opts := driver.AcquireOptions{TTL: time.Minute, Wait: true}
	held, err := b.AcquirePermit(ctx, "k", sem, opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.AcquirePermit(ctx, "k", sem, opts)
		done <- err
	}()
	for memlock.PermitWaiters(b, "k") != 1 {
		if ctx.Err() != nil {
			t.Fatal("the waiter did not queue")
		}
		runtime.Gosched()
	}
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, memlock.ErrClosed) {
			t.Fatalf("waiter: %v; want ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not end the waiter")
	}
	if n := memlock.PermitWaiters(b, "k"); n != 0 {
		t.Fatalf("%d waiters left in line", n)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestListShowsLocksOnly: List shows one holder per key, the lock, as
// driver.Lister says, so that a listing (the gateway's, status) never
// shows a permit as the key's lock; Permits shows the permits, in token
// order, each with its slot.
func TestListShowsLocksOnly(t *testing.T) {
	b := memlock.New()
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	opts := driver.AcquireOptions{TTL: time.Minute}
	lock, err := b.Acquire(ctx, "k", opts)
	if err != nil {
		t.Fatal(err)
	}
	var permits []driver.Lease
	for range 2 {
		p, err := b.AcquirePermit(ctx, "k", driver.Semaphore{Limit: 2, Slots: true}, opts)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	hs, err := b.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Key != "k" || hs[0].Token != lock.Token() {
		t.Errorf("List = %+v; want the lock alone (token %d)", hs, lock.Token())
	}
	st, err := b.Permits(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Holders) != 2 {
		t.Fatalf("Permits = %+v; want 2 permits", st)
	}
	for i, h := range st.Holders {
		if h.Token != permits[i].Token() || h.Slot != i || !h.HasSlot {
			t.Errorf("Permits.Holders[%d] = %+v; want token %d, slot %d", i, h, permits[i].Token(), i)
		}
	}
}
