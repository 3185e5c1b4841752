package distlocktest

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/semaphore"
)

// RunSemaphore runs the conformance suite of package semaphore against
// the backends newBackend returns, which must implement
// driver.Semaphores, with the options of Run (WithTTL). The tests run one
// after another, each as a subtest.
func RunSemaphore(t *testing.T, newBackend Factory, opts ...Option) {
	s := newSuite(newBackend, opts)
	s.runTests(t, []suiteTest{
		{"Limit/NeverExceededAndReached", s.testPermitLimit},
		{"Limit/Mismatch", s.testPermitLimitMismatch},
		{"Limit/KeptByAWaiter", s.testPermitLimitKeptByAWaiter},
		{"Tokens/Increasing", s.testPermitTokens},
		{"Slots", s.testPermitSlots},
		{"Lost/ComesBack", s.testPermitComesBack},
		{"Revoked/ComesBack", s.testPermitRevoked},
		{"Abandoned/ComesBack", s.testPermitAbandoned},
		{"Acquire/CancelledLeaveNothing", s.testPermitCancelled},
		{"TryAcquire", s.testPermitTry},
		{"Holders", s.testPermitHolders},
	})
}

// semaphoreName returns a name unique to this run and test.
func (s *suite) semaphoreName(t *testing.T) string {
	return strings.TrimPrefix(s.key(t), "distlocktest/")
}

// semaphore returns the semaphore name over a Client of its own, as
// another process has.
func (s *suite) semaphore(t *testing.T, name string, limit int, opts ...semaphore.Option) *semaphore.Semaphore {
	t.Helper()
	return s.semaphoreOver(t, s.client(t), name, limit, opts...)
}

func (s *suite) semaphoreOver(t *testing.T, c *distlock.Client, name string, limit int, opts ...semaphore.Option) *semaphore.Semaphore {
	t.Helper()
	opts = append([]semaphore.Option{semaphore.WithLockOptions(distlock.WithTTL(s.ttl))}, opts...)
	sem, err := semaphore.New(c, name, limit, opts...)
	if err != nil {
		t.Fatalf("semaphore.New(%q, %d): %v", name, limit, err)
	}
	return sem
}

// storedLimit is the limit Holders reports of a semaphore whose permits
// name limit: limit, or driver.UnknownLimit with WithUnstoredLimit.
func (s *suite) storedLimit(limit int) int {
	if s.unstoredLimit {
		return driver.UnknownLimit
	}
	return limit
}

// assertNoPermits checks that the semaphore has no live permit and
// stores no limit.
func (s *suite) assertNoPermits(t *testing.T, ctx context.Context, sem *semaphore.Semaphore) {
	t.Helper()
	limit, hs, err := sem.Holders(ctx)
	if err != nil {
		t.Fatalf("Holders: %v", err)
	}
	if len(hs) != 0 || limit != s.storedLimit(0) {
		t.Fatalf("Holders: limit %d and %d permits %v; want none left behind", limit, len(hs), hs)
	}
}

// permitted counts the holders inside a section guarded by a semaphore.
// A holder counts while its permit is live by the contract: until its
// context ends or its local deadline passes, whichever is first. The
// service may grant a lost permit's place again only after that local
// deadline, so a grant seen afterwards does not overlap it, whether or
// not the lost holder's goroutine has left the section yet.
type permitted struct {
	limit  int
	full   chan struct{} // closed when limit live holders were inside at once
	once   sync.Once
	mu     sync.Mutex
	in     map[*semaphore.Permit]struct{} // entered and not yet left
	most   int
	lost   int
	tokens []uint64
}

func newPermitted(limit int) *permitted {
	return &permitted{limit: limit, full: make(chan struct{}), in: map[*semaphore.Permit]struct{}{}}
}

// livePermit reports whether p is live at now: its context has not ended
// and its local deadline, if bounded, is after now.
func livePermit(p *semaphore.Permit, now time.Time) bool {
	if p.Err() != nil {
		return false
	}
	d, ok := p.Deadline()
	return !ok || d.After(now)
}

func (ps *permitted) enter(t *testing.T, p *semaphore.Permit) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.tokens = append(ps.tokens, p.Token())
	ps.in[p] = struct{}{}
	now := time.Now()
	n := 0
	for q := range ps.in {
		if livePermit(q, now) {
			n++
		}
	}
	if n > ps.limit {
		t.Errorf("%d live holders at once with a limit of %d (token %d)", n, ps.limit, p.Token())
	}
	ps.most = max(ps.most, n)
	if n == ps.limit {
		ps.once.Do(func() { close(ps.full) })
	}
}

// leave takes p out of the section and reports whether it was lost
// there, which a permit may be (a renewal late under load); it fails the
// test for any other error.
func (ps *permitted) leave(t *testing.T, p *semaphore.Permit) (lost bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	delete(ps.in, p)
	return ps.lostLocked(t, p, p.Err())
}

// released checks the error of p's Release, done after leave: nil, or one
// matching distlock.ErrLockLost if p was lost meanwhile. It reports
// whether p was lost.
func (ps *permitted) released(t *testing.T, p *semaphore.Permit, lostInside bool, err error) (lost bool) {
	switch {
	case err == nil:
		return lostInside
	case errors.Is(err, distlock.ErrLockLost):
		if lostInside {
			return true
		}
		ps.mu.Lock()
		defer ps.mu.Unlock()
		return ps.lostLocked(t, p, err)
	default:
		t.Errorf("Release of permit %d: %v", p.Token(), err)
		return false
	}
}

func (ps *permitted) lostLocked(t *testing.T, p *semaphore.Permit, err error) bool {
	if err == nil {
		return false
	}
	if !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("permit %d ended inside the section: %v", p.Token(), err)
		return false
	}
	ps.lost++
	return true
}

// testPermitLimit: 64 goroutines over 8 Clients, limit 5: never more than
// 5 live holders at once, and 5 at once is reached (each holder stays
// until it has been); every token is unique. A holder whose permit is
// lost meanwhile (a renewal late under load) leaves, its Release may
// report ErrLockLost, and it acquires again until it releases a permit
// it still held.
func (s *suite) testPermitLimit(t *testing.T) {
	const limit, clients, perClient = 5, 8, 8
	ctx, name := s.ctx(t), s.semaphoreName(t)
	ps := newPermitted(limit)
	var (
		wg    sync.WaitGroup
		clean atomic.Int32
	)
	for range clients {
		sem := s.semaphore(t, name, limit)
		for range perClient {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					p, err := sem.Acquire(ctx)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					ps.enter(t, p)
					select { // hold until limit holders were inside at once
					case <-ps.full:
					case <-p.Done():
					case <-ctx.Done():
					}
					runtime.Gosched()
					lost := ps.leave(t, p)
					if !ps.released(t, p, lost, p.Release(ctx)) {
						clean.Add(1)
						return
					}
					if ctx.Err() != nil {
						t.Errorf("permit %d lost and the test's context ended: %v", p.Token(), ctx.Err())
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if ps.lost > 0 {
		t.Logf("%d permits lost inside the section (renewals late under load), acquired again", ps.lost)
	}
	if t.Failed() {
		return
	}
	if m := ps.most; m != limit {
		t.Fatalf("at most %d live holders at once; want the limit, %d", m, limit)
	}
	if n := int(clean.Load()); n != clients*perClient {
		t.Fatalf("%d permits held through to their release; want %d", n, clients*perClient)
	}
	if n := len(ps.tokens); n != clients*perClient+ps.lost {
		t.Fatalf("%d permits granted; want %d and %d lost", n, clients*perClient, ps.lost)
	}
	tokens := slices.Clone(ps.tokens)
	slices.Sort(tokens)
	if i := slices.IndexFunc(tokens[1:], func(tk uint64) bool { return tk == 0 }); tokens[0] == 0 || i >= 0 {
		t.Fatalf("token 0 granted")
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] == tokens[i-1] {
			t.Fatalf("token %d granted twice", tokens[i])
		}
	}
	s.assertNoPermits(t, ctx, s.semaphore(t, name, limit))
}

// testPermitLimitMismatch: while a permit is live or awaited, a permit
// naming another limit is refused with a *driver.LimitError matching
// ErrInvalidOption, granting nothing; once none is, the next asker sets
// the limit.
func (s *suite) testPermitLimitMismatch(t *testing.T) {
	if s.unstoredLimit {
		t.Skip("the backend's layout stores no limit (WithUnstoredLimit)")
	}
	ctx, name := s.ctx(t), s.semaphoreName(t)
	three, four := s.semaphore(t, name, 3), s.semaphore(t, name, 4)
	p, err := three.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	for _, acquire := range []func(context.Context) (*semaphore.Permit, error){four.Acquire, four.TryAcquire} {
		q, err := acquire(ctx)
		var le *driver.LimitError
		if err == nil {
			q.Release(ctx)
			t.Fatalf("a permit of limit 4 granted while one of limit 3 is held")
		}
		if !errors.Is(err, distlock.ErrInvalidOption) || !errors.As(err, &le) || le.Stored != 3 || le.Asked != 4 {
			t.Fatalf("Acquire with limit 4: %v; want a *driver.LimitError{Stored: 3, Asked: 4} matching ErrInvalidOption", err)
		}
	}
	limit, hs, err := four.Holders(ctx)
	if err != nil || limit != 3 || len(hs) != 1 || hs[0].Token != p.Token() {
		t.Fatalf("Holders: %d, %v, %v; want limit 3 and the one permit %d", limit, hs, err, p.Token())
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	q, err := four.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire with limit 4 once no permit is live: %v", err)
	}
	if limit, _, err := three.Holders(ctx); err != nil || limit != 4 {
		t.Fatalf("Holders: limit %d, %v; want 4", limit, err)
	}
	if err := q.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// testPermitLimitKeptByAWaiter: a waiter keeps the limit stored when the
// last permit is given back, until it is granted: an asker naming another
// limit is refused with a *driver.LimitError then too. A backend that hands
// a permit to its first waiter as it is given back (memlock) never shows
// a semaphore with a waiter and no permit; one whose waiter claims its
// permit once woken does, between the release and the claim.
func (s *suite) testPermitLimitKeptByAWaiter(t *testing.T) {
	if s.unstoredLimit {
		t.Skip("the backend's layout stores no limit (WithUnstoredLimit)")
	}
	ctx, name := s.ctx(t), s.semaphoreName(t)
	// The permit held while a waiter queues is leased for long (see held).
	one, two := s.semaphore(t, name, 1, semaphore.WithLockOptions(distlock.WithTTL(held))), s.semaphore(t, name, 2)
	key := semaphore.KeyPrefix + name
	c := s.client(t)
	p, err := one.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	type result struct {
		p   *semaphore.Permit
		err error
	}
	got := make(chan result, 1)
	wctx, cancel := context.WithTimeout(ctx, s.lapse())
	defer cancel()
	waiter := s.semaphore(t, name, 1)
	go func() {
		q, err := waiter.Acquire(wctx)
		got <- result{q, err}
	}()
	for deadline := time.Now().Add(s.lapse()); ; {
		st, err := c.Permits(ctx, key)
		if err != nil {
			t.Fatalf("Permits: %v", err)
		}
		if st.Waiting == 1 {
			break
		}
		if st.Waiting > 1 || time.Now().After(deadline) {
			t.Fatalf("Permits: %+v; want the one waiter in line", st)
		}
		time.Sleep(5 * time.Millisecond) // polls a condition, with a deadline
	}
	refused := func(when string) {
		t.Helper()
		q, err := two.TryAcquire(ctx)
		if err == nil {
			q.Release(ctx)
			t.Fatalf("%s: a permit of limit 2 granted while one of limit 1 is awaited", when)
		}
		var le *driver.LimitError
		if !errors.As(err, &le) || le.Stored != 1 || le.Asked != 2 {
			t.Fatalf("%s: TryAcquire with limit 2: %v; want a *driver.LimitError{Stored: 1, Asked: 2}", when, err)
		}
	}
	refused("held and awaited")
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	refused("given back, awaited")
	r := <-got
	if r.err != nil {
		t.Fatalf("the waiter's Acquire: %v", r.err)
	}
	if st, err := c.Permits(ctx, key); err != nil || st.Limit != 1 || len(st.Holders) != 1 || st.Waiting != 0 {
		t.Fatalf("Permits: %+v, %v; want limit 1, the waiter's permit and nobody waiting", st, err)
	}
	if err := r.p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	s.assertNoPermits(t, ctx, one)
}

// testPermitTokens: permits granted one after another, over Clients of
// their own and mixed with locks of the key, have increasing tokens.
func (s *suite) testPermitTokens(t *testing.T) {
	ctx, name := s.ctx(t), s.semaphoreName(t)
	var tokens []uint64
	held := []*semaphore.Permit{}
	for i := range 12 {
		sem := s.semaphore(t, name, 3)
		p, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire %d: %v", i, err)
		}
		tokens = append(tokens, p.Token())
		held = append(held, p)
		if len(held) == 3 { // release the oldest: the next is granted in its place
			if err := held[0].Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			held = held[1:]
		}
	}
	checkIncreasing(t, "permits", tokens)
	for _, p := range held {
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

// testPermitSlots: with WithSlots, every live permit has its own slot in
// [0, limit), and each slot's tokens increase. A permit lost meanwhile (a
// renewal late under load) no longer holds its slot once its local
// deadline has passed: a later grant of that slot is no double use, and
// its holder acquires again.
func (s *suite) testPermitSlots(t *testing.T) {
	if s.noSlots {
		s.testPermitSlotsRefused(t)
		return
	}
	const limit = 3
	ctx, name := s.ctx(t), s.semaphoreName(t)
	var (
		mu     sync.Mutex
		inUse  = map[int]*semaphore.Permit{}
		bySlot = map[int][]uint64{}
		lost   int
		wg     sync.WaitGroup
	)
	for range 4 {
		sem := s.semaphore(t, name, limit, semaphore.WithSlots())
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					p, err := sem.Acquire(ctx)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					slot := p.Slot()
					mu.Lock()
					if slot < 0 || slot >= limit {
						t.Errorf("slot %d not in [0, %d)", slot, limit)
					} else if other, ok := inUse[slot]; ok && livePermit(other, time.Now()) {
						t.Errorf("slot %d held by live tokens %d and %d at once", slot, other.Token(), p.Token())
					}
					inUse[slot] = p
					bySlot[slot] = append(bySlot[slot], p.Token())
					mu.Unlock()
					runtime.Gosched()
					mu.Lock()
					if inUse[slot] == p {
						delete(inUse, slot)
					}
					mu.Unlock()
					err = p.Release(ctx)
					if err == nil {
						return
					}
					if !errors.Is(err, distlock.ErrLockLost) {
						t.Errorf("Release: %v", err)
						return
					}
					mu.Lock()
					lost++
					mu.Unlock()
					if ctx.Err() != nil {
						t.Errorf("permit %d lost and the test's context ended: %v", p.Token(), ctx.Err())
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if lost > 0 {
		t.Logf("%d permits lost while held (renewals late under load), acquired again", lost)
	}
	for slot, tokens := range bySlot {
		checkIncreasing(t, fmt.Sprintf("slot %d", slot), tokens)
	}
	// Holders names a live permit's slot.
	sem := s.semaphore(t, name, limit, semaphore.WithSlots())
	p, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	_, hs, err := sem.Holders(ctx)
	if err != nil || len(hs) != 1 || !hs[0].HasSlot || hs[0].Slot != p.Slot() || hs[0].Token != p.Token() {
		t.Fatalf("Holders: %+v, %v; want the permit of token %d and slot %d", hs, err, p.Token(), p.Slot())
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// testPermitSlotsRefused: on a backend whose permits cannot name slots
// (WithoutSlots), a permit asked with WithSlots is refused with an error
// matching errors.ErrUnsupported, by Acquire as by TryAcquire, and leaves
// no permit behind: the whole limit is free afterwards.
func (s *suite) testPermitSlotsRefused(t *testing.T) {
	const limit = 2
	ctx, name := s.ctx(t), s.semaphoreName(t)
	slots := s.semaphore(t, name, limit, semaphore.WithSlots())
	for _, acquire := range []func(context.Context) (*semaphore.Permit, error){slots.Acquire, slots.TryAcquire} {
		p, err := acquire(ctx)
		if err == nil {
			p.Release(ctx)
			t.Fatalf("a permit with a slot granted (slot %d) by a backend without slots", p.Slot())
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("Acquire with slots: %v; want an error matching errors.ErrUnsupported", err)
		}
	}
	plain := s.semaphore(t, name, limit)
	s.assertNoPermits(t, ctx, plain)
	var ps []*semaphore.Permit
	for range limit {
		p, err := plain.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire after the refused permits: %v", err)
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

// testPermitRevoked: the permits the service drops (WithRevoke), as when
// their holder's session ends, are lost, the holder told at once, and
// given back to a holder waiting for one, with a greater token.
func (s *suite) testPermitRevoked(t *testing.T) {
	if s.revoke == nil {
		t.Skip("no WithRevoke")
	}
	ctx, name := s.ctx(t), s.semaphoreName(t)
	p, err := s.semaphore(t, name, 1).Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	type result struct {
		p   *semaphore.Permit
		err error
	}
	got := make(chan result, 1)
	wctx, cancel := context.WithTimeout(ctx, s.lapse())
	defer cancel()
	waiter := s.semaphore(t, name, 1)
	go func() {
		q, err := waiter.Acquire(wctx)
		got <- result{q, err}
	}()
	s.revoke(t, semaphore.KeyPrefix+name)
	waitDone(t, p.Done(), s.lapse(), "a revoked permit")
	if err := p.Err(); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("Err of a revoked permit: %v; want ErrLockLost", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("Acquire of the revoked permit: %v", r.err)
	}
	if r.p.Token() <= p.Token() {
		t.Errorf("token %d after the revoked permit's %d", r.p.Token(), p.Token())
	}
	if err := r.p.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// testPermitComesBack: the permits of a holder cut off from the service
// are lost (their contexts end) and given back within their TTL, to a
// holder waiting for one.
func (s *suite) testPermitComesBack(t *testing.T) {
	if s.unbounded {
		t.Skip("permits without a TTL come back when their session ends: not tested here yet")
	}
	ctx, name := s.ctx(t), s.semaphoreName(t)
	f := NewFaulty(s.newBackend(t))
	lost := s.semaphoreOver(t, s.clientOver(t, f), name, 2)
	var ps []*semaphore.Permit
	for range 2 {
		p, err := lost.Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		ps = append(ps, p)
	}
	f.Partition(semaphore.KeyPrefix + name)
	wctx, cancel := context.WithTimeout(ctx, s.lapse())
	defer cancel()
	q, err := s.semaphore(t, name, 2).Acquire(wctx)
	if err != nil {
		t.Fatalf("Acquire while the holder of both permits is cut off: %v", err)
	}
	for _, p := range ps {
		waitDone(t, p.Done(), s.lapse(), "a cut-off holder's permit")
		if err := p.Err(); !errors.Is(err, distlock.ErrLockLost) {
			t.Fatalf("Err of a cut-off holder's permit: %v; want ErrLockLost", err)
		}
	}
	if err := q.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// testPermitAbandoned: permits whose holder went away without a word (it
// neither renews nor releases them, as a killed process) are given back
// within their TTL, to a holder waiting for one.
func (s *suite) testPermitAbandoned(t *testing.T) {
	if s.unbounded {
		t.Skip("permits without a TTL come back when their session ends: not tested here yet")
	}
	ctx, name := s.ctx(t), s.semaphoreName(t)
	b, ok := s.newBackend(t).(driver.Semaphores)
	if !ok {
		t.Fatalf("the backend does not implement driver.Semaphores")
	}
	key := semaphore.KeyPrefix + name
	for range 2 {
		if _, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 2}, driver.AcquireOptions{TTL: s.ttl}); err != nil {
			t.Fatalf("AcquirePermit: %v", err)
		}
	}
	if s.revoke != nil {
		// As for locks (lapseLease): where grants lapse with their
		// session alone, which an open Backend keeps alive, revoke
		// stands for the holder's end.
		s.revoke(t, key)
	}
	wctx, cancel := context.WithTimeout(ctx, s.lapse())
	defer cancel()
	q, err := s.semaphore(t, name, 2).Acquire(wctx)
	if err != nil {
		t.Fatalf("Acquire while both permits are abandoned: %v", err)
	}
	if err := q.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// testPermitCancelled: 1,000 acquires, each cancelled at a random moment
// while permits come and go, leave no permit behind: none is held and no
// limit is stored once they have returned, and the whole limit is free.
func (s *suite) testPermitCancelled(t *testing.T) {
	const limit, acquires, clients = 3, 1000, 4
	ctx, name := s.ctx(t), s.semaphoreName(t)
	sems := make([]*semaphore.Semaphore, clients)
	cs := make([]*distlock.Client, clients)
	for i := range sems {
		cs[i] = s.client(t)
		sems[i] = s.semaphoreOver(t, cs[i], name, limit)
	}
	var wg sync.WaitGroup
	var granted atomic.Int32
	for i := range acquires {
		wg.Add(2)
		actx, cancel := context.WithCancel(ctx)
		go func() {
			defer wg.Done()
			for range mrand.IntN(20) {
				runtime.Gosched()
			}
			cancel()
		}()
		go func() {
			defer wg.Done()
			defer cancel()
			p, err := sems[i%clients].Acquire(actx)
			if err != nil {
				if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
					t.Errorf("Acquire: %v; want ErrNotAcquired and context.Canceled", err)
				}
				return
			}
			granted.Add(1)
			if err := p.Release(ctx); err != nil && !errors.Is(err, distlock.ErrLockLost) {
				t.Errorf("Release: %v", err)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of %d acquires granted", granted.Load(), acquires)
	// A permit granted too late for its Acquire is given back in the
	// background; Close waits for that. Whatever is left then was left
	// behind (waiting instead, a leaked lease would lapse unseen).
	for _, c := range cs {
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	s.assertNoPermits(t, ctx, s.semaphore(t, name, limit))
	var ps []*semaphore.Permit
	for range limit {
		p, err := s.semaphore(t, name, limit).TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire after the cancelled acquires: %v", err)
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

// testPermitTry: TryAcquire is refused with ErrNotAcquired when every
// permit is held, holding nothing, and granted once one is released.
func (s *suite) testPermitTry(t *testing.T) {
	ctx, name := s.ctx(t), s.semaphoreName(t)
	sem := s.semaphore(t, name, 2)
	a, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	b, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if c, err := s.semaphore(t, name, 2).TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			c.Release(ctx)
		}
		t.Fatalf("TryAcquire with both permits held: %v; want ErrNotAcquired", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	c, err := s.semaphore(t, name, 2).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("TryAcquire after a release: %v", err)
	}
	for _, p := range []*semaphore.Permit{b, c} {
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	s.assertNoPermits(t, ctx, sem)
}

// testPermitHolders: Holders lists the live permits of the semaphore
// alone, in token order, with their owners, and the stored limit.
func (s *suite) testPermitHolders(t *testing.T) {
	ctx, name := s.ctx(t), s.semaphoreName(t)
	var ps []*semaphore.Permit
	for _, owner := range []string{"first", "second"} {
		sem := s.semaphore(t, name, 3, semaphore.WithLockOptions(distlock.WithLockOwner(owner)))
		p, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		ps = append(ps, p)
	}
	other, err := s.semaphore(t, name+"2", 1).Acquire(ctx) // a name the first is a prefix of
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	limit, hs, err := s.semaphore(t, name, 3).Holders(ctx)
	if err != nil {
		t.Fatalf("Holders: %v", err)
	}
	if limit != s.storedLimit(3) || len(hs) != 2 {
		t.Fatalf("Holders: limit %d, %v; want 3 and the 2 permits", limit, hs)
	}
	for i, h := range hs {
		want := []string{"first", "second"}[i]
		if h.Key != semaphore.KeyPrefix+name || h.Token != ps[i].Token() || h.Owner != want || h.HasSlot {
			t.Fatalf("Holders[%d] = %+v; want key %q, token %d, owner %q, no slot", i, h, semaphore.KeyPrefix+name, ps[i].Token(), want)
		}
	}
	for _, p := range append(ps, other) {
		if err := p.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}
