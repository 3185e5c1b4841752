//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
)

func acquirePermit(t *testing.T, b *filelock.Backend, key string, sem driver.Semaphore) driver.Lease {
	t.Helper()
	p, err := b.AcquirePermit(ctxFor(t), key, sem, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("AcquirePermit(%q, %+v): %v", key, sem, err)
	}
	return p
}

func tryPermit(b *filelock.Backend, key string, sem driver.Semaphore) (driver.Lease, error) {
	return b.AcquirePermit(context.Background(), key, sem, driver.AcquireOptions{TTL: time.Minute})
}

// permitResult is what an AcquirePermit in a goroutine returned.
type permitResult struct {
	l   driver.Lease
	err error
}

// waitPermit starts an AcquirePermit that waits, in a goroutine.
func waitPermit(ctx context.Context, b *filelock.Backend, key string, sem driver.Semaphore) <-chan permitResult {
	got := make(chan permitResult, 1)
	go func() {
		l, err := b.AcquirePermit(ctx, key, sem, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		got <- permitResult{l, err}
	}()
	return got
}

// awaitPermits polls Permits until cond holds of the state, or fails the
// test after a minute.
func awaitPermits(t *testing.T, b *filelock.Backend, key string, what string, cond func(driver.PermitState) bool) driver.PermitState {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		st, err := b.Permits(context.Background(), key)
		if err != nil {
			t.Fatalf("Permits: %v", err)
		}
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("Permits = %+v; want %s", st, what)
		}
		time.Sleep(5 * time.Millisecond) // polls a condition, with a deadline
	}
}

// A permit holder killed with SIGKILL gives its permit back at once: a
// waiter blocked before the kill is served without any TTL to wait for,
// with a greater token.
func TestKilledPermitHolderGivesItBack(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	sem := driver.Semaphore{Limit: 1}
	for round := range 3 {
		h := startHolder(t, dir, "jobs", helperPermitsEnv+"=1")
		// The fault bites: the permit is really held by the other process.
		if _, err := tryPermit(b, "jobs", sem); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("round %d: AcquirePermit while the helper holds the only permit: %v, want ErrNotAcquired", round, err)
		}
		st, err := b.Permits(context.Background(), "jobs")
		if err != nil || st.Limit != 1 || len(st.Holders) != 1 || st.Holders[0].Token != h.token || st.Holders[0].Owner != "helper" {
			t.Fatalf("round %d: Permits = %+v, %v; want the helper's permit %d", round, st, err, h.token)
		}
		got := waitPermit(ctxFor(t), b, "jobs", sem)
		awaitPermits(t, b, "jobs", "our waiter in line", func(st driver.PermitState) bool { return st.Waiting == 1 })
		h.kill(t)
		r := <-got
		if r.err != nil {
			t.Fatalf("round %d: waiter: %v", round, r.err)
		}
		if r.l.Token() <= h.token {
			t.Errorf("round %d: token %d after the dead holder's %d", round, r.l.Token(), h.token)
		}
		release(t, r.l)
	}
}

// Waiters of several processes are served in arrival order: a waiter in
// another process that queued first is granted the permit given back, not
// the later waiter of this process, which is granted the permit when the
// other gives it back (its process dies). A waiter killed in line leaves
// it at once, and keeps neither its place nor the stored limit.
func TestPermitWaitersOfProcessesServedInOrder(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	sem := driver.Semaphore{Limit: 1}
	held := acquirePermit(t, b, "k", sem)

	// A waiter that dies in line.
	dead := startHelper(t, dir, "k", helperPermitsEnv+"=1")
	awaitPermits(t, b, "k", "the first helper in line", func(st driver.PermitState) bool { return st.Waiting == 1 })
	dead.kill(t)
	awaitPermits(t, b, "k", "nobody in line", func(st driver.PermitState) bool { return st.Waiting == 0 })

	first := startHelper(t, dir, "k", helperPermitsEnv+"=1")
	awaitPermits(t, b, "k", "the helper in line", func(st driver.PermitState) bool { return st.Waiting == 1 })
	second := waitPermit(ctxFor(t), b, "k", sem)
	awaitPermits(t, b, "k", "both waiters in line", func(st driver.PermitState) bool { return st.Waiting == 2 })
	release(t, held)
	select {
	case s := <-first.line:
		first.parse(t, s)
	case r := <-second:
		t.Fatalf("the later waiter, of this process, was served first (%v, %v)", r.l, r.err)
	case <-time.After(time.Minute):
		t.Fatal("the first waiter was not served")
	}
	st := awaitPermits(t, b, "k", "the helper's permit and our waiter", func(st driver.PermitState) bool {
		return len(st.Holders) == 1 && st.Holders[0].Token == first.token && st.Waiting == 1
	})
	if st.Limit != 1 || st.Holders[0].Owner != "helper" {
		t.Fatalf("Permits = %+v; want limit 1 and the helper's permit", st)
	}
	first.kill(t)
	r := <-second
	if r.err != nil {
		t.Fatalf("the second waiter: %v", r.err)
	}
	if r.l.Token() <= first.token {
		t.Errorf("token %d after the first waiter's %d", r.l.Token(), first.token)
	}
	release(t, r.l)
	if st, err := b.Permits(context.Background(), "k"); err != nil || st.Limit != 0 || len(st.Holders) != 0 || st.Waiting != 0 {
		t.Fatalf("Permits = %+v, %v; want nothing left", st, err)
	}
	// Nothing pins the limit: another limit is accepted.
	p, err := tryPermit(b, "k", driver.Semaphore{Limit: 2})
	if err != nil {
		t.Fatalf("AcquirePermit with another limit once nothing is live: %v", err)
	}
	release(t, p)
}

// File hands a permit's slot file over, as a lock's lock file: a child
// process that has the descriptor keeps the permit held after its holder
// is killed, until it ends too.
func TestPermitFileOutlivesHolder(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	sem := driver.Semaphore{Limit: 1}
	h := startHolder(t, dir, "k", helperPermitsEnv+"=1", helperPassEnv+"=1")
	h.kill(t)
	if _, err := tryPermit(b, "k", sem); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("AcquirePermit after the holder died, its slot file still open elsewhere: %v, want ErrNotAcquired", err)
	}
	if err := syscall.Kill(h.child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p := acquirePermit(t, b, "k", sem)
	if p.Token() <= h.token {
		t.Errorf("token %d after %d", p.Token(), h.token)
	}
	f, err := b.File(grantOf("k", p))
	if err != nil {
		t.Fatalf("File of a held permit: %v", err)
	}
	// The descriptor is on the permit's description: its flock is the
	// permit's, so locking it again succeeds.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Errorf("flock on File's descriptor: %v, want the permit's own lock", err)
	}
	f.Close()
	release(t, p)
	if _, err := b.File(grantOf("k", p)); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("File after Release: %v, want ErrLockLost", err)
	}
}

// List shows locks only, one holder per key as driver.Lister says, and
// never a permit as the key's lock: the semaphore's files are not lock
// files, and drawing a permit's token leaves the key's lock file free to
// List. Permits shows the permits, in token order, each with its slot.
func TestListShowsLocksOnly(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	ctx := context.Background()
	sem := driver.Semaphore{Limit: 2, Slots: true}
	var permits []driver.Lease
	for range 2 {
		permits = append(permits, acquirePermit(t, b, "k", sem))
	}
	if hs, err := b.List(ctx, ""); err != nil || len(hs) != 0 {
		t.Fatalf("List = %+v, %v; want no lock", hs, err)
	}
	if _, ok, err := b.Holder(ctx, "k"); err != nil || ok {
		t.Fatalf("Holder: %v, %v; want the key's lock free", ok, err)
	}
	lock := acquire(t, b, "k")
	hs, err := b.List(ctx, "")
	if err != nil || len(hs) != 1 || hs[0].Key != "k" || hs[0].Token != lock.Token() {
		t.Fatalf("List = %+v, %v; want the lock alone (token %d)", hs, err, lock.Token())
	}
	st, err := b.Permits(ctx, "k")
	if err != nil || st.Limit != 2 || len(st.Holders) != 2 || st.Waiting != 0 {
		t.Fatalf("Permits = %+v, %v; want the 2 permits", st, err)
	}
	for i, h := range st.Holders {
		if h.Key != "k" || h.Token != permits[i].Token() || h.Slot != i || !h.HasSlot {
			t.Errorf("Permits.Holders[%d] = %+v; want token %d, slot %d", i, h, permits[i].Token(), i)
		}
		if s := permits[i].(driver.SlotLease).Slot(); s != i {
			t.Errorf("permit %d has slot %d", i, s)
		}
	}
	release(t, lock)
	for _, p := range permits {
		release(t, p)
	}
}

// Locks and permits of one key draw their tokens from the key's one
// counter, so that each is above every one before it; a permit's token is
// drawn under a shared flock of the key's lock file, so that a held lock
// of the key holds the grant of its permits back until it is released.
func TestPermitsAndLocksShareTheCounter(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	sem := driver.Semaphore{Limit: 3}
	var tokens []uint64
	p := acquirePermit(t, b, "k", sem)
	tokens = append(tokens, p.Token())
	lock := acquire(t, b, "k")
	tokens = append(tokens, lock.Token())
	if _, err := tryPermit(b, "k", sem); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("AcquirePermit while a lock of the key is held: %v, want ErrNotAcquired", err)
	}
	got := waitPermit(ctxFor(t), b, "k", sem)
	awaitPermits(t, b, "k", "a waiter in line", func(st driver.PermitState) bool { return st.Waiting == 1 })
	release(t, lock)
	r := <-got
	if r.err != nil {
		t.Fatalf("AcquirePermit once the lock is released: %v", r.err)
	}
	tokens = append(tokens, r.l.Token())
	lock = acquire(t, b, "k")
	tokens = append(tokens, lock.Token())
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens %v, permits and locks taken in turn, do not increase", tokens)
		}
	}
	for _, l := range []driver.Lease{lock, p, r.l} {
		release(t, l)
	}
}

// A permit whose slot file is removed or replaced is lost, as a lock
// whose lock file is: its Refresh and Release say so.
func TestPermitSlotFileRemoved(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	p := acquirePermit(t, b, "k", driver.Semaphore{Limit: 1, Slots: true})
	if _, err := p.Refresh(context.Background(), time.Minute); err != nil {
		t.Fatalf("Refresh of a held permit: %v", err)
	}
	if err := os.Remove(filepath.Join(dir, "k.slot.0")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Refresh(context.Background(), time.Minute); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Refresh after the slot file was removed: %v, want ErrLockLost", err)
	}
	if err := p.Release(context.Background()); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release after the slot file was removed: %v, want ErrLockLost", err)
	}
	release(t, acquirePermit(t, b, "k", driver.Semaphore{Limit: 1}))
}

// Close ends the AcquirePermits waiting for a permit with ErrClosed, and
// they leave nothing in line.
func TestCloseEndsPermitWaiters(t *testing.T) {
	dir := t.TempDir()
	b, other := newBackend(t, dir), newBackend(t, dir)
	sem := driver.Semaphore{Limit: 1}
	held := acquirePermit(t, other, "k", sem)
	got := waitPermit(ctxFor(t), b, "k", sem)
	awaitPermits(t, other, "k", "the waiter in line", func(st driver.PermitState) bool { return st.Waiting == 1 })
	b.Close()
	select {
	case r := <-got:
		if !errors.Is(r.err, filelock.ErrClosed) {
			t.Fatalf("waiter: %v; want ErrClosed", r.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Close did not end the waiter")
	}
	if st, err := other.Permits(context.Background(), "k"); err != nil || st.Waiting != 0 {
		t.Fatalf("Permits = %+v, %v; want nobody in line", st, err)
	}
	release(t, held)
}

// Waiters of one Backend are served in arrival order too, each permit
// given back going to the first in line; a waiter that gives up is passed
// over, and leaves nothing behind.
func TestPermitWaitersServedInOrder(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	sem := driver.Semaphore{Limit: 2}
	held := []driver.Lease{acquirePermit(t, b, "k", sem), acquirePermit(t, b, "k", sem)}
	const n, quitter = 5, 1
	quit, quitCancel := context.WithCancel(ctxFor(t))
	defer quitCancel()
	waiters := make([]<-chan permitResult, n)
	for i := range n {
		ctx := ctxFor(t)
		if i == quitter {
			ctx = quit
		}
		waiters[i] = waitPermit(ctx, b, "k", sem)
		awaitPermits(t, b, "k", "one more waiter in line", func(st driver.PermitState) bool { return st.Waiting == i+1 })
	}
	quitCancel()
	if r := <-waiters[quitter]; r.err == nil {
		t.Fatalf("a waiter that gave up was granted a permit")
	}
	for i := range n {
		if i == quitter {
			continue
		}
		release(t, held[0])
		held = held[1:]
		select {
		case r := <-waiters[i]:
			if r.err != nil {
				t.Fatalf("waiter %d: %v", i, r.err)
			}
			held = append(held, r.l)
		case <-time.After(time.Minute):
			t.Fatalf("waiter %d not served", i)
		}
		for j := i + 1; j < n; j++ {
			select {
			case r := <-waiters[j]:
				t.Fatalf("waiter %d served before waiter %d's turn came (%v)", j, i+1, r.err)
			default:
			}
		}
	}
	for _, l := range held {
		release(t, l)
	}
	if st, err := b.Permits(context.Background(), "k"); err != nil || st.Limit != 0 || len(st.Holders) != 0 || st.Waiting != 0 {
		t.Fatalf("Permits = %+v, %v; want nothing left", st, err)
	}
}
