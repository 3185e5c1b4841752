package memlock_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	srv := memlock.New() // one service; every "process" is a view of it
	distlocktest.Run(t, func(t *testing.T) driver.Backend { return srv },
		distlocktest.WithTTL(300*time.Millisecond),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			if !srv.Revoke(key) {
				t.Fatalf("Revoke(%q): no grant to revoke", key)
			}
		}))
	if n := memlock.Queued(srv); n != 0 {
		t.Errorf("%d keys still queued after the suite", n)
	}
}

// Waiters of a key are granted it in arrival order, each as the one before
// releases, and nothing stays queued.
func TestFIFO(t *testing.T) {
	b := memlock.New()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := driver.AcquireOptions{TTL: time.Minute, Wait: true}
	holder, err := b.Acquire(ctx, "k", opts)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	granted := make(chan int, n)
	leases := make([]driver.Lease, n)
	for i := range n {
		go func() {
			l, err := b.Acquire(ctx, "k", opts)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			leases[i] = l
			granted <- i
		}()
		// The first waiter has the key's turn and waits for the holder;
		// the others wait for the turn.
		for memlock.Queued(b)+memlock.Waiting(b, "k") != i+1 {
			if ctx.Err() != nil {
				t.Fatalf("waiter %d did not queue", i)
			}
			runtime.Gosched()
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range n {
		select {
		case i := <-granted:
			if i != want {
				t.Fatalf("granted to waiter %d, want %d", i, want)
			}
			if err := leases[i].Release(ctx); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatalf("waiter %d never granted", want)
		}
	}
	if n := memlock.Queued(b); n != 0 {
		t.Errorf("%d keys still queued", n)
	}
}

// A first waiter that gives up while it waits for the holder passes the
// key's turn on: the next waiter gets the key at the release.
func TestFirstWaiterGivesUp(t *testing.T) {
	b := memlock.New()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := driver.AcquireOptions{TTL: time.Minute, Wait: true}
	holder, err := b.Acquire(ctx, "k", opts)
	if err != nil {
		t.Fatal(err)
	}
	firstCtx, giveUp := context.WithCancel(ctx)
	firstErr := make(chan error, 1)
	go func() {
		_, err := b.Acquire(firstCtx, "k", opts)
		firstErr <- err
	}()
	for memlock.Queued(b) != 1 {
		if ctx.Err() != nil {
			t.Fatal("the first waiter did not queue")
		}
		runtime.Gosched()
	}
	second := make(chan driver.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "k", opts)
		if err != nil {
			t.Errorf("second waiter: %v", err)
		}
		second <- l
	}()
	for memlock.Waiting(b, "k") != 1 {
		if ctx.Err() != nil {
			t.Fatal("the second waiter did not queue")
		}
		runtime.Gosched()
	}
	giveUp()
	if err := <-firstErr; !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("first waiter: %v, want ErrNotAcquired and context.Canceled", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-second:
		if l != nil {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	case <-ctx.Done():
		t.Fatal("the second waiter never got the key")
	}
	if n := memlock.Queued(b); n != 0 {
		t.Errorf("%d keys still queued", n)
	}
}

// Close ends both kinds of waiter with ErrClosed (the one that has the
// key's turn and waits for the holder, and the one queued for the turn),
// refuses later acquisitions, and leaves a held lease working.
func TestCloseEndsWaiters(t *testing.T) {
	b := memlock.New()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := driver.AcquireOptions{TTL: time.Minute, Wait: true}
	holder, err := b.Acquire(ctx, "k", opts)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for i := range 2 {
		go func() {
			_, err := b.Acquire(ctx, "k", opts)
			errs <- err
		}()
		for memlock.Queued(b)+memlock.Waiting(b, "k") != i+1 {
			if ctx.Err() != nil {
				t.Fatalf("waiter %d did not queue", i)
			}
			runtime.Gosched()
		}
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, memlock.ErrClosed) || !errors.Is(err, distlock.ErrClosed) {
				t.Errorf("waiter at Close: %v, want ErrClosed", err)
			}
		case <-ctx.Done():
			t.Fatal("a waiter did not end at Close")
		}
	}
	for _, wait := range []bool{false, true} {
		if _, err := b.Acquire(ctx, "other", driver.AcquireOptions{TTL: time.Minute, Wait: wait}); !errors.Is(err, distlock.ErrClosed) {
			t.Errorf("Acquire (wait %v) after Close: %v, want ErrClosed", wait, err)
		}
	}
	if _, err := holder.Refresh(ctx, time.Minute); err != nil {
		t.Errorf("Refresh of a lease held at Close: %v", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Errorf("Release of a lease held at Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if n := memlock.Queued(b); n != 0 {
		t.Errorf("%d keys still queued", n)
	}
}

func TestSemaphoreConformance(t *testing.T) {
	srv := memlock.New()
	t.Cleanup(func() { srv.Close() })
	distlocktest.RunSemaphore(t, func(t *testing.T) driver.Backend { return srv },
		distlocktest.WithTTL(300*time.Millisecond),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			if !srv.Revoke(key) {
				t.Fatalf("Revoke(%q): no grant to revoke", key)
			}
		}))
}

func TestSharedConformance(t *testing.T) {
	srv := memlock.New()
	t.Cleanup(func() { srv.Close() })
	distlocktest.RunShared(t, func(t *testing.T) driver.Backend { return srv },
		distlocktest.WithTTL(300*time.Millisecond),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			if !srv.Revoke(key) {
				t.Fatalf("Revoke(%q): no grant to revoke", key)
			}
		}))
}

// The partition suite: every member a Client of the one in-process
// service, whose grants lapse by their TTL. The TTL is longer than the
// other suites': 8 members renew 72 locks, and on a loaded machine
// (load average 40 on 2 cores) renewals of a 500ms TTL came too late, so
// that every member kept losing its membership.
func TestPartitionConformance(t *testing.T) {
	srv := memlock.New()
	t.Cleanup(func() { srv.Close() })
	distlocktest.RunPartition(t, func(t *testing.T) driver.Backend { return srv },
		distlocktest.WithTTL(2*time.Second),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			if !srv.Revoke(key) {
				t.Fatalf("Revoke(%q): no grant to revoke", key)
			}
		}))
}
