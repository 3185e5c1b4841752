package distlocktest

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/rwlock"
)

// RunShared runs the conformance suite of shared (read) locks and package
// rwlock against the backends newBackend returns, which must implement
// driver.SharedLocks, with the options of Run (WithTTL, WithRevoke). The
// tests run one after another, each as a subtest.
func RunShared(t *testing.T, newBackend Factory, opts ...Option) {
	s := newSuite(newBackend, opts)
	s.runTests(t, []suiteTest{
		{"Readers/Share", s.testReadersShare},
		{"Readers/ExcludedByWriter", s.testReadersExcluded},
		{"Exclusion/RandomTiming", s.testSharedRandom},
		{"Writer/WaitingBlocksLaterReaders", s.testWriterBlocksReaders},
		{"Writer/NotStarvedByReaders", s.testWriterNotStarved},
		{"Renewal/KeepsReadersPastTTL", s.testReadersRenewed},
		{"Upgrade/Refused", s.testUpgradeRefused},
		{"Tokens/Increasing", s.testSharedTokens},
		{"Lost/ReaderComesBack", s.testReaderLost},
		{"Revoked/ReaderIsTold", s.testReaderRevoked},
		{"Abandoned/ReaderComesBack", s.testReaderAbandoned},
		{"Acquire/CancelledLeaveNothing", s.testSharedCancelled},
		{"Readers/Listed", s.testReadersListed},
		{"BadInput", s.testSharedBadInput},
	})
}

// rw returns the read/write lock of key over a Client of its own, as
// another process has.
func (s *suite) rw(t *testing.T, key string, opts ...distlock.LockOption) *rwlock.RWLock {
	t.Helper()
	return s.rwOver(t, s.client(t), key, opts...)
}

// held is how long the holders of a test that checks what does not
// happen while they hold are leased for: long enough that no renewal late
// under load ends them in the window.
const held = 30 * time.Second

// acquired is the result of an acquire run in a goroutine, sent to the
// test's goroutine, which alone reports: a goroutine never fails a test
// that may have ended.
type acquired struct {
	l   *distlock.Lock
	err error
}

// goAcquire runs acquire in a goroutine; its result comes on the channel.
// The test's clean-up waits for it and releases what it got unreceived.
func goAcquire(t *testing.T, acquire func(context.Context) (*distlock.Lock, error), ctx context.Context) <-chan acquired {
	ch := make(chan acquired, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l, err := acquire(ctx)
		ch <- acquired{l, err}
	}()
	t.Cleanup(func() {
		<-done
		select {
		case a := <-ch:
			if a.l != nil {
				a.l.Release(context.Background())
			}
		default:
		}
	})
	return ch
}

func (s *suite) rwOver(t *testing.T, c *distlock.Client, key string, opts ...distlock.LockOption) *rwlock.RWLock {
	t.Helper()
	opts = append([]distlock.LockOption{distlock.WithTTL(s.ttl)}, opts...)
	rw, err := rwlock.New(c, key, rwlock.WithLockOptions(opts...))
	if err != nil {
		t.Fatalf("rwlock.New(%q): %v", key, err)
	}
	return rw
}

// granted returns a function that fails the test with what if it is
// given an error, and otherwise returns the lock: granted(t, what)(acquire()).
func granted(t *testing.T, what string) func(*distlock.Lock, error) *distlock.Lock {
	return func(l *distlock.Lock, err error) *distlock.Lock {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return l
	}
}

// refused checks that a try failed with ErrNotAcquired, releasing what it
// got if it did not.
func refused(t *testing.T, what string, l *distlock.Lock, err error) {
	t.Helper()
	if err == nil {
		l.Release(context.Background())
		t.Fatalf("%s granted; want ErrNotAcquired", what)
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("%s: %v; want ErrNotAcquired", what, err)
	}
}

func releaseAll(t *testing.T, ls ...*distlock.Lock) {
	t.Helper()
	for _, l := range ls {
		mustRelease(t, l)
	}
}

// assertNoReaders checks that key has no live shared grant.
func assertNoReaders(t *testing.T, ctx context.Context, rw *rwlock.RWLock) {
	t.Helper()
	hs, err := rw.Readers(ctx)
	if err != nil {
		t.Fatalf("Readers: %v", err)
	}
	if len(hs) != 0 {
		t.Fatalf("Readers: %v; want none", hs)
	}
}

// testReadersShare: 8 readers over 4 Clients hold the key at once, each
// granted by a try; while they do, a writer's try, and an ordinary lock's,
// are refused. Once they are gone, the writer's try is granted.
func (s *suite) testReadersShare(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	var rs []*distlock.Lock
	for i := range 8 {
		rw := s.rw(t, key)
		if i%2 == 0 {
			rs = append(rs, granted(t, "RLock")(rw.RLock(ctx)))
		} else {
			rs = append(rs, granted(t, "TryRLock while only readers hold")(rw.TryRLock(ctx)))
		}
		if !rs[i].Shared() {
			t.Fatalf("a read lock's Shared() is false")
		}
	}
	w, err := s.rw(t, key).TryLock(ctx)
	refused(t, "TryLock while 8 readers hold", w, err)
	s.assertHeld(t, ctx, key)
	releaseAll(t, rs...)
	w = granted(t, "TryLock once the readers are gone")(s.rw(t, key).TryLock(ctx))
	if w.Shared() {
		t.Fatalf("a write lock's Shared() is true")
	}
	mustRelease(t, w)
}

// testReadersExcluded: while a writer holds the key (a write lock or an
// ordinary lock), a reader's try is refused, and a waiting reader is
// granted once the writer releases.
func (s *suite) testReadersExcluded(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	for _, writer := range []string{"write lock", "ordinary lock"} {
		var w *distlock.Lock
		if writer == "write lock" {
			w = granted(t, "Lock")(s.rw(t, key, distlock.WithTTL(held)).Lock(ctx))
		} else {
			w = mustAcquire(t, s.client(t), ctx, key, distlock.WithTTL(held))
		}
		r, err := s.rw(t, key).TryRLock(ctx)
		refused(t, "TryRLock while a "+writer+" holds", r, err)
		got := goAcquire(t, s.rw(t, key).RLock, ctx)
		select {
		case a := <-got:
			if a.l != nil {
				a.l.Release(ctx)
			}
			t.Fatalf("a reader granted while a %s holds (writer's Err: %v): %v", writer, w.Err(), a.err)
		case <-time.After(50 * time.Millisecond): // a wrong grant would come well within this; its absence is not relied on
		}
		mustRelease(t, w)
		select {
		case a := <-got:
			granted(t, "RLock")(a.l, a.err)
			mustRelease(t, a.l)
		case <-time.After(pushBound):
			t.Fatalf("a waiting reader not granted within %v of the %s's release", pushBound, writer)
		}
	}
}

// sharing checks the reader/writer invariant on the holders inside a
// section: a holder counts while its lock is live by the contract, until
// its context ends or its local deadline passes (see permitted).
type sharing struct {
	mu      sync.Mutex
	in      map[*distlock.Lock]struct{}
	readers int // most live readers at once
	lost    int
	tokens  []uint64
}

func liveLock(l *distlock.Lock, now time.Time) bool {
	if l.Err() != nil {
		return false
	}
	d, ok := l.Deadline()
	return !ok || d.After(now)
}

func (sh *sharing) enter(t *testing.T, l *distlock.Lock) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.tokens = append(sh.tokens, l.Token())
	sh.in[l] = struct{}{}
	now := time.Now()
	readers, writers := 0, 0
	for o := range sh.in {
		if !liveLock(o, now) {
			continue
		}
		if o.Shared() {
			readers++
		} else {
			writers++
		}
	}
	if writers > 1 || writers == 1 && readers > 0 {
		t.Errorf("%d writers and %d readers live at once (token %d entering, shared %v)", writers, readers, l.Token(), l.Shared())
	}
	sh.readers = max(sh.readers, readers)
}

func (sh *sharing) leave(t *testing.T, l *distlock.Lock, releaseErr error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.in, l)
	switch {
	case releaseErr == nil:
	case errors.Is(releaseErr, distlock.ErrLockLost): // a renewal late under load
		sh.lost++
	default:
		t.Errorf("Release of %d: %v", l.Token(), releaseErr)
	}
}

// testSharedRandom: 16 goroutines over 4 Clients take read locks (3 in 4)
// and write locks at random, holding each for a random moment: a writer
// is never live with another holder, and every token is unique.
func (s *suite) testSharedRandom(t *testing.T) {
	const clients, perClient, rounds = 4, 4, 20
	ctx, key := s.ctx(t), s.key(t)
	sh := &sharing{in: map[*distlock.Lock]struct{}{}}
	var wg sync.WaitGroup
	for range clients {
		rw := s.rw(t, key)
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					lock := rw.RLock
					if mrand.IntN(4) == 0 {
						lock = rw.Lock
					}
					l, err := lock(ctx)
					if err != nil {
						t.Errorf("acquire: %v", err)
						return
					}
					sh.enter(t, l)
					time.Sleep(time.Duration(mrand.IntN(2000)) * time.Microsecond)
					sh.leave(t, l, l.Release(ctx))
				}
			}()
		}
	}
	wg.Wait()
	if sh.lost > 0 {
		t.Logf("%d locks lost inside the section (renewals late under load)", sh.lost)
	}
	t.Logf("at most %d readers at once", sh.readers)
	tokens := slices.Clone(sh.tokens)
	slices.Sort(tokens)
	if len(tokens) > 0 && tokens[0] == 0 {
		t.Fatalf("token 0 granted")
	}
	if len(slices.Compact(tokens)) != len(sh.tokens) {
		t.Fatalf("a token granted twice")
	}
	s.assertFree(t, ctx, key)
}

// testWriterBlocksReaders: a writer waiting behind a reader keeps the
// readers who come after it out, tries included, until it has been
// granted and released the key; it is granted as soon as the reader goes.
func (s *suite) testWriterBlocksReaders(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	r := granted(t, "RLock")(s.rw(t, key, distlock.WithTTL(held)).RLock(ctx))
	got := goAcquire(t, s.rw(t, key, distlock.WithTTL(held)).Lock, ctx)
	later := s.rw(t, key)
	s.awaitWriterQueued(t, ctx, later)
	waiting := goAcquire(t, later.RLock, ctx)
	mustRelease(t, r)
	var w *distlock.Lock
	select {
	case a := <-got:
		w = granted(t, "Lock")(a.l, a.err)
	case a := <-waiting:
		if a.l != nil {
			a.l.Release(ctx)
		}
		t.Fatalf("a reader that came after a waiting writer was granted first: %v", a.err)
	case <-time.After(pushBound):
		t.Fatalf("the writer not granted within %v of the reader's release", pushBound)
	}
	select {
	case a := <-waiting:
		if a.l != nil {
			a.l.Release(ctx)
		}
		t.Fatalf("a reader granted while the writer holds (writer's Err: %v): %v", w.Err(), a.err)
	default:
	}
	mustRelease(t, w)
	select {
	case a := <-waiting:
		mustRelease(t, granted(t, "RLock")(a.l, a.err))
	case <-time.After(pushBound):
		t.Fatalf("the later reader not granted within %v of the writer's release", pushBound)
	}
}

// awaitWriterQueued waits until a writer that has begun to wait has its
// place in line: until then a reader's try may be granted, and from then
// on none is (three refusals in a row).
func (s *suite) awaitWriterQueued(t *testing.T, ctx context.Context, rw *rwlock.RWLock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for refusals := 0; refusals < 3; {
		l, err := rw.TryRLock(ctx)
		switch {
		case errors.Is(err, distlock.ErrNotAcquired):
			refusals++
			continue
		case err != nil:
			t.Fatalf("TryRLock: %v", err)
		}
		if refusals > 0 {
			l.Release(ctx)
			t.Fatalf("a reader's try granted after %d refusals while a writer waits", refusals)
		}
		mustRelease(t, l)
		if time.Now().After(deadline) {
			t.Fatalf("a reader's try still granted 10 s after a writer began waiting")
		}
		time.Sleep(5 * time.Millisecond) // the writer is asking meanwhile
	}
}

// testWriterNotStarved: readers hand the key on to each other, each
// holding until the next is granted (or, if the next waits, for a
// moment), so that the key is never free of readers while readers are
// granted freely; a writer asks meanwhile. Once the writer is seen to be
// in line (a reader's try is refused, as awaitWriterQueued checks), no
// reader who asks after that may be granted before it: none has a token
// below the writer's (a grant's token is above every earlier exclusive
// grant's, and the writer's above every earlier grant's). When the
// writer is seen in line is judged by the service's answers, not by time:
// a loaded machine may hand the key over many times while the writer's
// request is on its way, and those readers asked before it. A backend
// that lets readers pass a waiting writer grants them on and on: the
// readers stop after passes of them and the writer's wait is cancelled.
func (s *suite) testWriterNotStarved(t *testing.T) {
	const handOver, passes = 300 * time.Millisecond, 100
	ctx, key := s.ctx(t), s.key(t)
	rws := []*rwlock.RWLock{s.rw(t, key, distlock.WithTTL(held)), s.rw(t, key, distlock.WithTTL(held)), s.rw(t, key, distlock.WithTTL(held))}
	rctx, stopReaders := context.WithCancel(ctx)
	var (
		wg       sync.WaitGroup
		queued   atomic.Bool  // the writer has been seen in line
		after    atomic.Int32 // readers who asked after that and were granted
		granteds atomic.Int32
		mu       sync.Mutex
		tokens   []uint64 // of the readers who asked after the writer was seen in line
		failure  = make(chan error, 1)
	)
	defer func() { // on every way out: no reader outlives the test
		stopReaders()
		wg.Wait()
	}()
	var read func(i int, granted chan<- struct{})
	read = func(i int, granted chan<- struct{}) {
		defer wg.Done()
		asked := queued.Load()
		l, err := rws[i%len(rws)].RLock(rctx)
		close(granted)
		if err != nil {
			if rctx.Err() == nil {
				select {
				case failure <- err:
				default:
				}
			}
			return
		}
		granteds.Add(1)
		defer l.Release(ctx)
		if asked {
			mu.Lock()
			tokens = append(tokens, l.Token())
			mu.Unlock()
			if after.Add(1) > passes {
				stopReaders() // enough: the writer is being passed
				return
			}
		}
		if rctx.Err() != nil {
			return
		}
		next := make(chan struct{})
		wg.Add(1)
		go read(i+1, next)
		select {
		case <-next:
		case <-time.After(handOver):
		}
	}
	first := make(chan struct{})
	wg.Add(1)
	go read(0, first)
	<-first
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	context.AfterFunc(rctx, cancel) // readers passing the writer stop it too
	writer := goAcquire(t, s.rw(t, key, distlock.WithTTL(held)).Lock, wctx)
	s.awaitWriterQueued(t, ctx, s.rw(t, key))
	queued.Store(true)
	a := <-writer
	stopReaders()
	wg.Wait()
	var wtoken uint64
	if a.err == nil {
		wtoken = a.l.Token()
		mustRelease(t, a.l)
	}
	select {
	case err := <-failure:
		t.Fatalf("RLock: %v", err)
	default:
	}
	if a.err != nil {
		t.Fatalf("the writer not granted while %d readers who asked after it was in line were (writer: %v)", after.Load(), a.err)
	}
	var passed []uint64
	for _, token := range tokens {
		if token < wtoken {
			passed = append(passed, token)
		}
	}
	if len(passed) > 0 {
		t.Fatalf("%d readers who asked after the writer was in line were granted before it (tokens %v, the writer's %d)", len(passed), passed, wtoken)
	}
	t.Logf("%d readers granted, %d of them after the writer was in line, all after it", granteds.Load(), after.Load())
}

// testReadersRenewed: two readers held for three TTLs are renewed: both
// stay live and listed, and a writer's try is refused throughout.
//
// A renewal is only as timely as the machine lets it be: a stall longer
// than the TTL less the renewal interval ends a reader, and ending it is
// then the contract (see testRenewal). So a hold in which a reader ended
// is tried again. A hold whose readers were each seen renewed (their
// Deadline moved on) before one ended shows renewals at work and a
// machine too slow for them: such holds are tried again for as long as
// the suite allows a lease to lapse. A hold in which a reader ended
// before each had been seen renewed counts against renewalHolds: a
// backend or Client that does not renew readers loses every hold so.
// What may never happen is a reader missing from Readers, or a writer
// granted, while both readers' Err report them live.
func (s *suite) testReadersRenewed(t *testing.T) {
	ctx := s.ctx(t)
	until := time.Now().Add(s.lapse())
	unrenewed := 0
	for hold := 1; ; hold++ {
		ended, renewed := s.holdReadersPastTTL(t, ctx, s.key(t))
		if ended == nil {
			return
		}
		if !renewed {
			unrenewed++
		}
		switch {
		case unrenewed == renewalHolds:
			t.Fatalf("a reader ended before both were seen renewed in %d holds of 3 TTLs, the last: %v", unrenewed, ended)
		case time.Now().After(until):
			t.Fatalf("a renewed reader ended in each of %d holds of 3 TTLs over %v, the last: %v", hold, s.lapse(), ended)
		}
		t.Logf("hold %d of 3 TTLs: a reader ended (%v; both seen renewed before: %v); holding again", hold, ended, renewed)
	}
}

// holdReadersPastTTL holds two readers of key for three TTLs, checking
// meanwhile that they stay live, and then that both are listed and that a
// writer's try is refused. It returns why a reader ended if one did (a
// loss: the test fails at once on any other end), and whether each reader
// had been seen renewed before; it fails the test if the service forgot
// a reader, or granted a writer, while both readers' Err reported them
// live.
func (s *suite) holdReadersPastTTL(t *testing.T, ctx context.Context, key string) (ended error, renewed bool) {
	t.Helper()
	rs := []*distlock.Lock{
		granted(t, "RLock")(s.rw(t, key).RLock(ctx)),
		granted(t, "RLock")(s.rw(t, key).RLock(ctx)),
	}
	released := false
	defer func() {
		if !released {
			for _, r := range rs {
				r.Release(context.Background())
			}
		}
	}()
	first := make([]time.Time, len(rs)) // each reader's first Deadline
	seen := make([]bool, len(rs))       // its Deadline seen to move on
	watch := func() {
		for i, r := range rs {
			d, ok := r.Deadline()
			switch {
			case !ok:
			case first[i].IsZero():
				first[i] = d
			case d.After(first[i]):
				seen[i] = true
			}
		}
	}
	lost := func() error {
		t.Helper()
		for _, r := range rs {
			if err := r.Err(); err != nil {
				if !errors.Is(err, distlock.ErrLockLost) {
					t.Fatalf("a renewed reader ended: %v; want it live, or lost under load", err)
				}
				return err
			}
		}
		return nil
	}
	defer func() { renewed = !slices.Contains(seen, false) }() // on every return
	watch()
	end := time.Now().Add(3 * s.ttl)
	for time.Now().Before(end) {
		select {
		case <-rs[0].Done():
		case <-rs[1].Done():
		case <-time.After(s.ttl / 4):
		}
		watch()
		if err := lost(); err != nil {
			return err, false
		}
	}
	hs, err := s.rw(t, key).Readers(ctx)
	if err != nil {
		t.Fatalf("Readers after three TTLs: %v", err)
	}
	if len(hs) != 2 {
		if err := lost(); err != nil {
			return err, false
		}
		t.Fatalf("Readers after three TTLs: %v; want both readers, whose Err report them live", hs)
	}
	w, err := s.rw(t, key).TryLock(ctx)
	if err == nil {
		w.Release(ctx)
		if err := lost(); err != nil {
			return err, false
		}
		t.Fatalf("TryLock granted while two renewed readers hold, their Err reporting them live")
	}
	refused(t, "TryLock while two renewed readers hold", w, err)
	released = true
	var gone error
	for _, r := range rs {
		switch err := r.Release(ctx); {
		case err == nil:
		case errors.Is(err, distlock.ErrLockLost): // ended since the checks
			gone = err
		default:
			t.Fatalf("Release of a renewed reader: %v", err)
		}
	}
	return gone, false
}

// testUpgradeRefused: a write lock asked under a read lock's context of
// the same key is refused with ErrUpgrade at once, tries too; a read lock
// under a read or write lock's context re-enters it.
func (s *suite) testUpgradeRefused(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	rw := s.rw(t, key)
	r := granted(t, "RLock")(rw.RLock(ctx))
	for _, lock := range []func(context.Context) (*distlock.Lock, error){rw.Lock, rw.TryLock} {
		w, err := lock(r.Context())
		if err == nil {
			w.Release(ctx)
			t.Fatalf("a write lock granted under a read lock's context")
		}
		if !errors.Is(err, distlock.ErrUpgrade) {
			t.Fatalf("Lock under a read lock's context: %v; want ErrUpgrade", err)
		}
	}
	rr := granted(t, "RLock under a read lock's context")(rw.RLock(r.Context()))
	if rr.Token() != r.Token() {
		t.Fatalf("a read lock under a read lock's context has token %d; want the outer's %d (re-entered)", rr.Token(), r.Token())
	}
	releaseAll(t, rr, r)
	w := granted(t, "Lock")(rw.Lock(ctx))
	wr := granted(t, "RLock under a write lock's context")(rw.RLock(w.Context()))
	if wr.Token() != w.Token() || wr.Shared() {
		t.Fatalf("a read lock under a write lock's context: token %d, shared %v; want the writer's %d, re-entered", wr.Token(), wr.Shared(), w.Token())
	}
	releaseAll(t, wr, w)
	s.assertFree(t, ctx, key)
}

// testSharedTokens: every grant of a key, read or write or an ordinary
// lock, has a token above every earlier grant's; readers holding at once
// have distinct tokens.
func (s *suite) testSharedTokens(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	rw := s.rw(t, key)
	var last uint64
	next := func(what string, l *distlock.Lock) {
		t.Helper()
		if l.Token() <= last {
			t.Fatalf("%s has token %d, not above the last grant's %d", what, l.Token(), last)
		}
		last = l.Token()
	}
	for range 3 {
		w := granted(t, "Lock")(rw.Lock(ctx))
		next("a write lock", w)
		mustRelease(t, w)
		a := granted(t, "RLock")(rw.RLock(ctx))
		next("a read lock", a)
		b := granted(t, "RLock")(s.rw(t, key).RLock(ctx))
		next("a second read lock", b)
		releaseAll(t, a, b)
		l := mustAcquire(t, s.client(t), ctx, key, distlock.WithTTL(s.ttl))
		next("an ordinary lock", l)
		mustRelease(t, l)
	}
}

// testReaderLost: a reader cut off from the service is lost (its context
// ends with ErrLockLost) before a waiting writer is granted, within the
// lapse bound.
func (s *suite) testReaderLost(t *testing.T) {
	s.needLapse(t)
	ctx, key := s.ctx(t), s.key(t)
	f := NewFaulty(s.newBackend(t))
	r := granted(t, "RLock")(s.rwOver(t, s.clientOver(t, f), key).RLock(ctx))
	s.lose(t, f, key)
	wctx, cancel := context.WithTimeout(ctx, s.lapse())
	defer cancel()
	w := granted(t, "Lock while the reader is cut off")(s.rw(t, key).Lock(wctx))
	// Err judges by the local deadline, as the context does an instant
	// later: it must have ended before the writer's grant.
	if err := r.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("Err of a cut-off reader once a writer is granted: %v; want ErrLockLost", err)
	}
	waitDone(t, r.Done(), s.lapse(), "a cut-off reader's context")
	mustRelease(t, w)
}

// testReaderRevoked: a reader whose grant the service drops (WithRevoke)
// is told: its context ends with ErrLockLost, within the lapse bound (a
// revocation is the service's act: the holder learns of it after it, as
// for locks, and a writer may be granted meanwhile), and a writer is
// granted.
func (s *suite) testReaderRevoked(t *testing.T) {
	if s.revoke == nil {
		t.Skip("the backend gave no way to revoke a grant (WithRevoke)")
	}
	ctx, key := s.ctx(t), s.key(t)
	r := granted(t, "RLock")(s.rw(t, key, distlock.WithTTL(held)).RLock(ctx))
	s.revoke(t, key)
	wctx, cancel := context.WithTimeout(ctx, s.lapse())
	defer cancel()
	w := granted(t, "Lock after the reader was revoked")(s.rw(t, key).Lock(wctx))
	waitDone(t, r.Done(), s.lapse(), "a revoked reader's context")
	if err := r.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("Err of a revoked reader: %v; want ErrLockLost", err)
	}
	mustRelease(t, w)
}

// abandonReader takes a shared grant of key on a Backend of its own and
// abandons it as a process that went away without a word does: nothing
// renews or releases it, and its Backend is closed (its sessions and
// connections end), unless the factory returns one shared Backend.
func (s *suite) abandonReader(t *testing.T, ctx context.Context, key string) driver.Lease {
	t.Helper()
	nb := s.newBackend(t)
	b, ok := nb.(driver.SharedLocks)
	if !ok {
		t.Fatalf("the backend does not implement driver.SharedLocks")
	}
	l, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: s.ttl})
	if err != nil {
		t.Fatalf("AcquireShared: %v", err)
	}
	if c, ok := nb.(io.Closer); ok && nb != s.newBackend(t) {
		c.Close()
	} // else one shared Backend: its TTL alone frees the reader
	return l
}

// testReaderAbandoned: a reader whose process went away without a word is
// given back within its TTL, or with its session or connection: a writer
// waiting for it alone is granted, with nothing else happening on the
// key. A live reader stays meanwhile: a writer waits for it (renewals
// that keep a reader past its TTL are Renewal/KeepsReadersPastTTL's).
func (s *suite) testReaderAbandoned(t *testing.T) {
	s.needLapse(t) // a flock lives as long as its process: see filelock's own tests
	ctx, key := s.ctx(t), s.key(t)
	gone := s.abandonReader(t, ctx, key)
	wctx, cancel := context.WithTimeout(ctx, s.lapse())
	defer cancel()
	w := granted(t, "Lock while a reader is abandoned")(s.rw(t, key).Lock(wctx))
	mustRelease(t, w)

	// Leased for long (see held): a renewal late under load would end it
	// in the window the test checks.
	live := granted(t, "RLock")(s.rw(t, key, distlock.WithTTL(held)).RLock(ctx))
	gone = s.abandonReader(t, ctx, key)
	got := goAcquire(t, s.rw(t, key).Lock, ctx)
	// Past the abandoned reader's TTL, judged from before its request.
	v := gone.Validity()
	time.Sleep(time.Until(v.Sent.Add(v.TTL + s.ttl/2)))
	select {
	case a := <-got:
		if a.l != nil {
			a.l.Release(ctx)
		}
		t.Fatalf("a writer granted while a live reader holds (reader's Err: %v): %v", live.Err(), a.err)
	default:
	}
	if err := live.Err(); err != nil {
		t.Fatalf("the live reader ended with the abandoned one: %v", err)
	}
	mustRelease(t, live)
	select {
	case a := <-got:
		mustRelease(t, granted(t, "Lock")(a.l, a.err))
	case <-time.After(s.lapse()):
		t.Fatalf("the writer not granted within %v of the live reader's release: the abandoned reader %d stays", s.lapse(), gone.Token())
	}
}

// testSharedCancelled: 300 read and write acquires, each cancelled at a
// random moment while a reader or a writer holds in turn, leave nothing
// behind: soon after they have returned (grants that came too late are
// given back in the background), a writer's try is granted.
func (s *suite) testSharedCancelled(t *testing.T) {
	const acquires, clients = 300, 4
	ctx, key := s.ctx(t), s.key(t)
	rws := make([]*rwlock.RWLock, clients)
	for i := range rws {
		rws[i] = s.rw(t, key)
	}
	holder := s.rw(t, key)
	hctx, stopHolding := context.WithCancel(ctx)
	holding := make(chan error, 1)
	go func() { // a reader, then a writer, then a reader... each for a moment
		defer close(holding)
		for i := 0; hctx.Err() == nil; i++ {
			lock := holder.RLock
			if i%2 == 1 {
				lock = holder.Lock
			}
			l, err := lock(hctx)
			if err != nil {
				if hctx.Err() == nil {
					holding <- err
				}
				return
			}
			time.Sleep(time.Duration(mrand.IntN(2000)) * time.Microsecond)
			if err := l.Release(ctx); err != nil && !errors.Is(err, distlock.ErrLockLost) {
				holding <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	var grants atomic.Int32
	errs := make(chan error, acquires)
	for i := range acquires {
		wg.Add(2)
		actx, cancel := context.WithCancel(ctx)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(mrand.IntN(3000)) * time.Microsecond)
			cancel()
		}()
		go func() {
			defer wg.Done()
			defer cancel()
			lock := rws[i%clients].RLock
			if i%3 == 0 {
				lock = rws[i%clients].Lock
			}
			l, err := lock(actx)
			if err != nil {
				if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
					errs <- fmt.Errorf("acquire: %w; want ErrNotAcquired and context.Canceled", err)
				}
				return
			}
			grants.Add(1)
			if err := l.Release(ctx); err != nil && !errors.Is(err, distlock.ErrLockLost) {
				errs <- fmt.Errorf("Release: %w", err)
			}
		}()
	}
	wg.Wait()
	stopHolding()
	if err := <-holding; err != nil {
		t.Fatalf("the holder: %v", err)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d of %d acquires granted", grants.Load(), acquires)
	deadline := time.Now().Add(s.lapse())
	for {
		w, err := s.rw(t, key).TryLock(ctx)
		if err == nil {
			mustRelease(t, w)
			break
		}
		if !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryLock: %v", err)
		}
		if time.Now().After(deadline) {
			hs, _ := rws[0].Readers(ctx)
			t.Fatalf("the key still held %v after the cancelled acquires returned (readers: %v)", s.lapse(), hs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	assertNoReaders(t, ctx, rws[0])
}

// testReadersListed: Readers lists the live shared grants of exactly the
// key, by token, with their owners; Writer reports no holder meanwhile,
// and the write lock's holder when it holds. A Lister lists both kinds.
func (s *suite) testReadersListed(t *testing.T) {
	ctx, key := s.ctx(t), s.key(t)
	var rs []*distlock.Lock
	for _, owner := range []string{"first", "second"} {
		rs = append(rs, granted(t, "RLock")(s.rw(t, key, distlock.WithLockOwner(owner), distlock.WithTTL(held)).RLock(ctx)))
	}
	other := granted(t, "RLock")(s.rw(t, key+"2", distlock.WithTTL(held)).RLock(ctx)) // a key the first is a prefix of
	rw := s.rw(t, key)
	listed := func(when string) {
		t.Helper()
		hs, err := rw.Readers(ctx)
		if err != nil {
			t.Fatalf("Readers %s: %v", when, err)
		}
		if len(hs) != 2 {
			t.Fatalf("Readers %s: %v; want the 2 readers", when, hs)
		}
		for i, h := range hs {
			want := []string{"first", "second"}[i]
			if h.Key != key || h.Token != rs[i].Token() || h.Owner != want || !h.Shared {
				t.Fatalf("Readers[%d] %s = %+v; want key %q, token %d, owner %q, shared", i, when, h, key, rs[i].Token(), want)
			}
		}
		if h, held, err := rw.Writer(ctx); err != nil || held {
			t.Fatalf("Writer %s: %+v, %v, %v; want none", when, h, held, err)
		}
		if l, ok := s.newBackend(t).(driver.Lister); ok {
			hs, err := l.List(ctx, key)
			if err != nil {
				t.Fatalf("List %s: %v", when, err)
			}
			var shared int
			for _, h := range hs {
				switch {
				case h.Key != key:
				case h.Shared:
					shared++
				default:
					t.Fatalf("List(%q) %s: %v; an exclusive holder of %q listed", key, when, hs, key)
				}
			}
			if shared != 2 {
				t.Fatalf("List(%q) %s: %v; want the 2 readers of %q, shared", key, when, hs, key)
			}
		}
	}
	listed("while readers hold")
	// A writer waiting behind them is neither a holder nor a reader.
	waiter := goAcquire(t, s.rw(t, key, distlock.WithTTL(held)).Lock, ctx)
	s.awaitWriterQueued(t, ctx, s.rw(t, key))
	listed("while a writer waits behind the readers")
	releaseAll(t, rs...)
	select {
	case a := <-waiter:
		mustRelease(t, granted(t, "Lock")(a.l, a.err))
	case <-time.After(pushBound):
		t.Fatalf("the waiting writer not granted within %v of the readers' release", pushBound)
	}
	mustRelease(t, other)
	w := granted(t, "Lock")(s.rw(t, key, distlock.WithLockOwner("writer")).Lock(ctx))
	if h, held, err := rw.Writer(ctx); err != nil || !held || h.Token != w.Token() || h.Owner != "writer" || h.Shared {
		t.Fatalf("Writer: %+v, %v, %v; want token %d, owner writer", h, held, err, w.Token())
	}
	assertNoReaders(t, ctx, rw)
	mustRelease(t, w)
}

// testSharedBadInput: AcquireShared checks its input as Acquire does.
func (s *suite) testSharedBadInput(t *testing.T) {
	ctx := s.ctx(t)
	b, ok := s.newBackend(t).(driver.SharedLocks)
	if !ok {
		t.Fatalf("the backend does not implement driver.SharedLocks")
	}
	for _, key := range []string{"", "bad\x00key", string([]byte{0xff})} {
		if l, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: s.ttl}); !errors.Is(err, distlock.ErrInvalidKey) {
			if err == nil {
				l.Release(ctx)
			}
			t.Fatalf("AcquireShared(%q): %v; want ErrInvalidKey", key, err)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Second, distlock.MaxTTL + time.Second} {
		if l, err := b.AcquireShared(ctx, s.key(t), driver.AcquireOptions{TTL: ttl}); !errors.Is(err, distlock.ErrInvalidOption) {
			if err == nil {
				l.Release(ctx)
			}
			t.Fatalf("AcquireShared with TTL %v: %v; want ErrInvalidOption", ttl, err)
		}
	}
	if _, err := b.Readers(ctx, ""); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Fatalf("Readers(\"\"): %v; want ErrInvalidKey", err)
	}
}
