package distlocktest

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// RunHolder runs the tests of a backend's holder of one key against the
// backends newBackend returns, with the options of Run: its
// driver.HolderReader, which the backend must implement, its
// driver.HolderWatcher and its leases' driver.OwnerSetter, if it
// implements them (the tests of what it lacks are skipped). The tests run one
// after another, each as a subtest.
func RunHolder(t *testing.T, newBackend Factory, opts ...Option) {
	s := newSuite(newBackend, opts)
	s.runTests(t, []suiteTest{
		{"Holder/ExactKey", s.testHolderExactKey},
		{"SetOwner/SeenByOthersOwnerChecked", s.testSetOwner},
		{"Watch/ExactKey", s.testWatchExactKey},
		{"Watch/WokenNotPolled", s.testWatchWokenNotPolled},
		{"Watch/EndsWithContextAndClose", s.testWatchEnds},
	})
}

// readerOf returns the backend's holder reader, failing the test when it
// has none.
func readerOf(t *testing.T, b driver.Backend) driver.HolderReader {
	t.Helper()
	r, ok := b.(driver.HolderReader)
	if !ok {
		t.Fatalf("%T is no driver.HolderReader", b)
	}
	return r
}

// watcherOf returns the backend's holder reader and watcher; it skips the
// test when the backend cannot watch (a Client's Watch then polls).
func watcherOf(t *testing.T, b driver.Backend) (driver.HolderReader, driver.HolderWatcher) {
	t.Helper()
	r := readerOf(t, b)
	w, ok := b.(driver.HolderWatcher)
	if !ok {
		t.Skipf("%T is no driver.HolderWatcher: a Client's Watch polls", b)
	}
	return r, w
}

// holdFor is the TTL of the grants whose expiry must not matter to a test:
// a watcher reads again at a holder's expiry, and that must not be taken
// for a wake-up.
const holdFor = time.Minute

// acquireRaw takes key on b, with owner, without a Client's renewals.
func acquireRaw(t *testing.T, ctx context.Context, b driver.Backend, key, owner string) driver.Lease {
	t.Helper()
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: holdFor, Owner: owner})
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return l
}

func releaseRaw(t *testing.T, ctx context.Context, l driver.Lease) {
	t.Helper()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// Contract: Holder reads exactly one key, from another process than the
// holder's: nothing for a key while only a key it is a prefix of is held
// ("svc/leader" is not "svc/leader2"), the grant's token and owner while
// it is held, nothing after the release.
func (s *suite) testHolderExactKey(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	b := s.newBackend(t)
	reader := readerOf(t, s.newBackend(t))
	other := acquireRaw(t, ctx, b, key+"2", "other")
	defer releaseRaw(t, ctx, other)
	if h, held, err := reader.Holder(ctx, key); held || err != nil {
		t.Errorf("Holder(%q) = %+v, %v, %v while only %q is held", key, h, held, err, key+"2")
	}
	l := acquireRaw(t, ctx, b, key, "a")
	h, held, err := reader.Holder(ctx, key)
	if !held || err != nil || h.Key != key || h.Token != l.Token() || h.Owner != "a" {
		t.Errorf("Holder(%q) = %+v, %v, %v; want token %d, owner %q", key, h, held, err, l.Token(), "a")
	}
	if h, held, err := reader.Holder(ctx, key+"2"); !held || err != nil || h.Token != other.Token() || h.Owner != "other" {
		t.Errorf("Holder(%q) = %+v, %v, %v; want token %d", key+"2", h, held, err, other.Token())
	}
	releaseRaw(t, ctx, l)
	if h, held, err := reader.Holder(ctx, key); held || err != nil {
		t.Errorf("Holder(%q) after Release = %+v, %v, %v", key, h, held, err)
	}
	if _, _, err := reader.Holder(ctx, ""); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf(`Holder("") = %v, want ErrInvalidKey`, err)
	}
}

// Contract (skipped for a lease that is no driver.OwnerSetter, or whose
// SetOwner of a lock reports errors.ErrUnsupported): SetOwner replaces the
// owner of a held grant, as another
// process's Holder and an election's Leader read it, keeps the grant (its
// token, and the holder's right to release it), and is owner-checked: the
// grant gone, it fails with ErrLockLost and changes nothing.
func (s *suite) testSetOwner(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	b := s.newBackend(t)
	reader := readerOf(t, s.newBackend(t))
	l := acquireRaw(t, ctx, b, key, "a")
	set, ok := l.(driver.OwnerSetter)
	if !ok {
		releaseRaw(t, ctx, l)
		t.Skipf("%T is no driver.OwnerSetter: the backend cannot change a held grant's owner", l)
	}
	for i, owner := range []string{"b", "c|with|bars%", ""} {
		err := set.SetOwner(ctx, owner)
		if i == 0 && errors.Is(err, errors.ErrUnsupported) {
			// A lease type may hold grants of which only some can change
			// their owner (etcdlock: an election's candidacy, not a lock).
			releaseRaw(t, ctx, l)
			t.Skipf("SetOwner of a lock: %v", err)
		}
		if err != nil {
			t.Fatalf("SetOwner(%q): %v", owner, err)
		}
		if h, held, err := reader.Holder(ctx, key); !held || err != nil || h.Token != l.Token() || h.Owner != owner {
			t.Errorf("Holder() after SetOwner(%q) = %+v, %v, %v; want token %d", owner, h, held, err, l.Token())
		}
	}
	releaseRaw(t, ctx, l)
	if err := set.SetOwner(ctx, "late"); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("SetOwner after Release: %v, want ErrLockLost", err)
	}

	// A grant the service dropped, and the next holder's grant: the old
	// lease's SetOwner must not touch the new grant. (Without WithRevoke
	// the long TTL this test uses would not lapse in time.)
	if s.revoke == nil {
		return
	}
	old := acquireRaw(t, ctx, b, key, "old")
	next := s.lapseLease(t, ctx, s.newBackend(t), key)
	if err := old.(driver.OwnerSetter).SetOwner(ctx, "stale"); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("SetOwner of a dropped grant: %v, want ErrLockLost", err)
	}
	if h, held, err := reader.Holder(ctx, key); !held || err != nil || h.Token != next.Token() || h.Owner == "stale" {
		t.Errorf("Holder() = %+v, %v, %v; want the next grant %d, untouched", h, held, err, next.Token())
	}
	releaseRaw(t, ctx, next)
}

// countingReader counts the holder reads a Client makes through it.
type countingReader struct {
	driver.Backend
	r     driver.HolderReader
	w     driver.HolderWatcher
	reads atomic.Int64
}

func (c *countingReader) Holder(ctx context.Context, key string) (driver.Holder, bool, error) {
	c.reads.Add(1)
	return c.r.Holder(ctx, key)
}

func (c *countingReader) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	return c.w.WatchHolder(ctx, key)
}

// next receives the next holder from a Client's Watch.
func (s *suite) nextHolder(t *testing.T, ch <-chan distlock.Holder, what string) distlock.Holder {
	t.Helper()
	select {
	case h, ok := <-ch:
		if !ok {
			t.Fatalf("%s: Watch's channel closed", what)
		}
		return h
	case <-time.After(pushBound + 2*distlock.WatchPoll):
		t.Fatalf("%s: nothing from Watch", what)
	}
	panic("unreachable")
}

// Contract: a Client's Watch of a key reports that key's holders only,
// never those of a key it is a prefix of.
func (s *suite) testWatchExactKey(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	b := s.newBackend(t)
	readerOf(t, b)
	c := s.client(t)
	ch, err := c.Watch(ctx, key)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if h := s.nextHolder(t, ch, "first state"); h.Token != 0 {
		t.Fatalf("Watch of a free key sent %+v", h)
	}
	// Every change of the longer key; then one of key, which must be the
	// next thing sent.
	other := acquireRaw(t, ctx, b, key+"2", "other")
	if set, ok := other.(driver.OwnerSetter); ok {
		if err := set.SetOwner(ctx, "other, renamed"); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("SetOwner: %v", err)
		}
	}
	releaseRaw(t, ctx, other)
	other = acquireRaw(t, ctx, b, key+"2", "other again")
	defer releaseRaw(t, ctx, other)
	l := acquireRaw(t, ctx, b, key, "mine")
	if h := s.nextHolder(t, ch, "the grant of the key"); h.Key != key || h.Token != l.Token() || h.Owner != "mine" {
		t.Errorf("Watch(%q) sent %+v; want only its own grant %d", key, h, l.Token())
	}
	releaseRaw(t, ctx, l)
	if h := s.nextHolder(t, ch, "the release of the key"); h.Token != 0 {
		t.Errorf("Watch(%q) sent %+v; want the key free", key, h)
	}
}

// Contract: a watch is woken by the service, not by polling. A Client's
// Watch over a backend that watches reads a key's holder only when
// woken (and at the holder's expiry, far off here): while nothing changes,
// for longer than the poll interval (distlock.WatchPoll), it makes no read;
// a release is then seen with one read. A Watch that polled would read
// during that window; the window can only fail to catch a poller that a
// loaded machine delayed, never fail a watcher that is woken.
func (s *suite) testWatchWokenNotPolled(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	b := s.newBackend(t)
	wb := s.newBackend(t)
	r, w := watcherOf(t, wb)
	counted := &countingReader{Backend: wb, r: r, w: w}
	c := s.clientOver(t, counted)
	l := acquireRaw(t, ctx, b, key, "holder")
	ch, err := c.Watch(ctx, key)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if h := s.nextHolder(t, ch, "first state"); h.Token != l.Token() {
		t.Fatalf("Watch sent %+v; want token %d", h, l.Token())
	}
	before := counted.reads.Load()
	time.Sleep(2 * distlock.WatchPoll) // a window to catch a poll, not a wait for anything
	if n := counted.reads.Load() - before; n != 0 {
		t.Errorf("Watch read the holder %d times in %v while nothing changed: it polls", n, 2*distlock.WatchPoll)
	}
	before = counted.reads.Load()

	// The backend's own watch, which no timer feeds, is woken too.
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	raw, err := w.WatchHolder(wctx, key)
	if err != nil {
		t.Fatalf("WatchHolder: %v", err)
	}
	releaseRaw(t, ctx, l)
	if h := s.nextHolder(t, ch, "the release"); h.Token != 0 {
		t.Errorf("Watch sent %+v; want the key free", h)
	}
	if n := counted.reads.Load() - before; n < 1 {
		t.Errorf("Watch saw the release with %d reads", n)
	}
	select {
	case _, ok := <-raw:
		if !ok {
			t.Error("WatchHolder's channel closed before its context ended")
		}
	case <-time.After(pushBound):
		t.Errorf("WatchHolder not woken %v after a release", pushBound)
	}
}

// Contract: WatchHolder's channel is closed when its context ends, and
// when the Backend is closed; a Backend that is closed refuses to watch.
func (s *suite) testWatchEnds(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	b := s.newBackend(t)
	_, w := watcherOf(t, b)
	wctx, stop := context.WithCancel(ctx)
	ch, err := w.WatchHolder(wctx, key)
	if err != nil {
		t.Fatalf("WatchHolder: %v", err)
	}
	stop()
	drainClosed(t, ch, "after its context ended")
	if _, err := w.WatchHolder(ctx, ""); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf(`WatchHolder("") = %v, want ErrInvalidKey`, err)
	}
	ch, err = w.WatchHolder(ctx, key)
	if err != nil {
		t.Fatalf("WatchHolder: %v", err)
	}
	closer, ok := b.(interface{ Close() error })
	if !ok {
		return
	}
	if err := closer.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	drainClosed(t, ch, "after the Backend was closed")
	if ch, err := w.WatchHolder(ctx, key); !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("WatchHolder after Close = %v, %v; want ErrClosed", ch, err)
	}
}

func drainClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	timeout := time.After(pushBound)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("WatchHolder's channel not closed %v %s", pushBound, what)
		}
	}
}
