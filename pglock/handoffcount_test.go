package pglock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
)

// A session-mode hand-off costs one statement on each side, as a raw
// pg_advisory_unlock and pg_advisory_lock do: the release, and the
// waiter's distlock_acquire, which waits in the server and returns the
// token once granted.
func TestHandoffStatements(t *testing.T) {
	ctx, key := testCtx(t), "handoff-count/"+t.Name()
	admin := newPool(t, server)
	hpool, hsc := countedPool(t, server.DSN)
	wpool, wsc := countedPool(t, server.DSN)
	holder, err := pglock.New(hpool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	waiter, err := pglock.New(wpool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waiter.Close() })
	// The first grant of each Backend checks the schema: warm both.
	for _, b := range []*pglock.Backend{holder, waiter} {
		l := acquire(t, b, ctx, key+"/warm", driver.AcquireOptions{Wait: true})
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held := acquire(t, holder, ctx, key, driver.AcquireOptions{Wait: true})
	h0, w0 := hsc.n.Load(), wsc.n.Load()
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	eventually(t, 10*time.Second, "the waiter waits in the server", func() bool { return count(t, admin, waitingSQL, key) == 1 })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if n := hsc.n.Load() - h0; n != 1 {
		t.Errorf("the release sent %d statements, want 1", n)
	}
	if n := wsc.n.Load() - w0; n != 1 {
		t.Errorf("the waiter sent %d statements to be granted, want 1", n)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
