package distlocktest

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/fence"
)

// RunElection runs the conformance suite of package election against the
// backends newBackend returns, with the options of Run (WithTTL, and
// WithRevoke for a backend whose grants do not lapse by themselves). The
// tests run one after another, each as a subtest.
func RunElection(t *testing.T, newBackend Factory, opts ...Option) {
	s := newSuite(newBackend, opts)
	s.runTests(t, []suiteTest{
		{"Candidates", s.testCandidates},
		{"Leader/ExactName", s.testLeaderExactName},
		{"Observe/ProclaimAndResign", s.testObserve},
		{"Resign/EndedTermEndsNoLaterTerm", s.testResignEndedTerm},
		{"Campaign/ContextEnds", s.testCampaignContextEnds},
		{"Campaign/OneTry", s.testCampaignOneTry},
		{"Run", s.testRun},
	})
}

// candidate is one simulated process taking part in an election: a Client
// over its own backend, wrapped to cut it off from the service.
type candidate struct {
	f *Faulty
	c *distlock.Client
	e *election.Election
}

// candidate returns a candidate in the election name.
func (s *suite) candidate(t *testing.T, name string, opts ...distlock.LockOption) candidate {
	t.Helper()
	f := NewFaulty(s.newBackend(t))
	c := s.clientOver(t, f)
	e, err := election.New(c, name, election.WithLockOptions(append([]distlock.LockOption{distlock.WithTTL(s.ttl)}, opts...)...))
	if err != nil {
		t.Fatalf("election.New(%q): %v", name, err)
	}
	return candidate{f: f, c: c, e: e}
}

// electionName returns a name unique to this run and test.
func (s *suite) electionName(t *testing.T) string {
	return strings.TrimPrefix(s.key(t), "distlocktest/")
}

// terms checks, as terms begin, that at most one lives at a time and that
// their tokens increase.
//
// live counts the terms whose context is not done: one more when Campaign
// returns, one less when a goroutine sees the context done. That count
// alone would report false violations: the goroutine that decrements runs
// some time after the context ended, and another term may begin in
// between. So a count above one is only a suspicion; it is a violation
// when another counted term's Err is still nil at that instant (Err is
// exact on the local clock, as the contract says, ahead of the context's
// cancellation) and the new term's Err is nil after it: both then lived
// at once. A term whose Err reports it ended is one whose decrement is
// still on its way.
type terms struct {
	live atomic.Int64

	mu      sync.Mutex
	counted map[*election.Term]struct{}
	max     uint64   // largest token of a term begun so far
	tokens  []uint64 // in the order the terms began
	values  map[uint64][]string
}

// begin counts t, begun with value, and checks it against the others. It
// returns a function to call when t's context is done.
func (ts *terms) begin(t *testing.T, term *election.Term, value string) (end func()) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.counted == nil {
		ts.counted, ts.values = map[*election.Term]struct{}{}, map[uint64][]string{}
	}
	tok := term.Token()
	ts.values[tok] = append(ts.values[tok], value)
	ts.tokens = append(ts.tokens, tok)
	if n := ts.live.Add(1); n > 1 {
		for other := range ts.counted {
			if other.Err() == nil && term.Err() == nil {
				t.Errorf("two live terms at once: token %d began while token %d lives (%d counted)", tok, other.Token(), n)
			}
		}
	}
	// Tokens must grow with terms. A term begun earlier with a token at
	// least this one is a violation if this term still lives: it was
	// granted either while this one lived, or before it with a larger
	// token.
	if tok <= ts.max && term.Err() == nil {
		t.Errorf("term with token %d began after a term with token %d", tok, ts.max)
	}
	ts.max = max(ts.max, tok)
	ts.counted[term] = struct{}{}
	return func() {
		ts.mu.Lock()
		delete(ts.counted, term)
		ts.mu.Unlock()
		ts.live.Add(-1)
	}
}

// proclaimed records that term may show value.
func (ts *terms) proclaimed(term *election.Term, value string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.values[term.Token()] = append(ts.values[term.Token()], value)
}

// Contract: among many candidates that campaign, resign, proclaim, give
// up campaigns and abandon terms (they stop renewing), at most one term's
// context lives at any instant; terms' tokens increase; one fence.Register
// admits every live term's write, in order, and refuses an ended term's
// late write; Leader agrees with the live term; Observe sees leaders in
// term order, never going back, and settles on no leader at the end; a
// Campaign whose context ends returns an error and no term.
func (s *suite) testCandidates(t *testing.T) {
	const candidates, rounds = 32, 3
	ctx, name := s.ctx(t), s.electionName(t)
	reg := fence.NewRegister()
	resource := name + "/resource"
	var ts terms

	// The observer: its own Client, reading until the end.
	obsCtx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	observer := s.candidate(t, name)
	observed := observer.e.Observe(obsCtx)
	var seen []election.Leader
	obsDone := make(chan struct{})
	var lastSeen atomic.Uint64 // token of the last leader seen, 0 for none
	go func() {
		defer close(obsDone)
		for l := range observed {
			seen = append(seen, l)
			lastSeen.Store(l.Token)
		}
	}()

	var (
		abandonedMu sync.Mutex
		abandoned   []*election.Term
		terms       atomic.Int64
		gaveUp      atomic.Int64
	)
	var wg sync.WaitGroup
	for i := range candidates {
		cand := s.candidate(t, name)
		wg.Go(func() {
			for round := range rounds {
				value := fmt.Sprintf("candidate %d, round %d", i, round)
				cctx, cancel := ctx, context.CancelFunc(func() {})
				limited := mrand.IntN(5) == 0
				if limited {
					cctx, cancel = context.WithTimeout(ctx, time.Duration(mrand.IntN(20))*time.Millisecond)
				}
				term, err := cand.e.Campaign(cctx, value)
				cancel()
				if err != nil {
					if term != nil {
						t.Errorf("Campaign returned a term (token %d) with its error %v", term.Token(), err)
					}
					if !limited || !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("candidate %d: Campaign: %v", i, err)
						return
					}
					gaveUp.Add(1)
					continue
				}
				terms.Add(1)
				end := ts.begin(t, term, value)
				ended := make(chan struct{})
				go func() {
					<-term.Done()
					end()
					close(ended)
				}()
				s.leadOnce(t, ctx, cand, term, value, &ts, reg, resource)
				switch r := mrand.IntN(8); {
				case r == 0 && s.canLapse():
					// Abandon the term: stop renewing it (or have the
					// service drop it), and let it end.
					s.lose(t, cand.f, cand.e.Key())
					waitDone(t, term.Done(), s.lapse(), "abandoned term")
					cand.f.Heal()
					if err := term.Resign(ctx); !errors.Is(err, distlock.ErrLockLost) {
						t.Errorf("Resign of a lost term: %v, want ErrLockLost", err)
					}
					abandonedMu.Lock()
					abandoned = append(abandoned, term)
					abandonedMu.Unlock()
				default:
					time.Sleep(time.Duration(mrand.IntN(2000)) * time.Microsecond)
					before := stateOf(term)
					if err := term.Resign(ctx); err != nil && !before.lostBy(err) {
						t.Errorf("Resign: %v", err)
					}
				}
				waitDone(t, ended, s.lapse(), "term's context after its end")
			}
		})
	}
	wg.Wait()
	if terms.Load() == 0 {
		t.Fatal("no term at all")
	}

	// One more term after every other, so that each abandoned term has a
	// later one that wrote.
	last := s.candidate(t, name)
	term, err := last.e.Campaign(ctx, "last")
	if err != nil {
		t.Fatalf("last Campaign: %v", err)
	}
	ts.begin(t, term, "last")()
	s.write(t, term, reg, resource)
	for _, a := range abandoned {
		err := reg.Do(resource, a.Token(), func() error { return nil })
		if !errors.Is(err, fence.ErrStaleToken) {
			t.Errorf("late write of abandoned term %d (highest %d): %v, want ErrStaleToken", a.Token(), reg.Highest(resource), err)
		}
	}
	// Observe sees the last term, which stays until it does, and then no
	// leader after its resignation. Renewals that came late may end the
	// last term early, as any other (see lostBy): Observe need not see a
	// term that ended, and its Resign then reports the loss.
	waitSeen := func(token uint64, what string, live func() bool) {
		t.Helper()
		deadline := time.Now().Add(s.lapse())
		for lastSeen.Load() != token {
			if !live() {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("Observe did not see %s within %v: last seen token %d", what, s.lapse(), lastSeen.Load())
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitSeen(term.Token(), "the last term", func() bool { return term.Err() == nil })
	before := stateOf(term)
	if err := term.Resign(ctx); err != nil && !before.lostBy(err) {
		t.Errorf("last Resign: %v", err)
	}
	waitSeen(0, "no leader after the last resignation", func() bool { return true })
	stopObs()
	<-obsDone
	t.Logf("%d terms, %d abandoned, %d campaigns given up; %d leaders observed", terms.Load(), len(abandoned), gaveUp.Load(), len(seen))
	checkObserved(t, seen, &ts)
}

// leadOnce does what a leader does once: checks that Leader reports it,
// writes through the fence, and sometimes proclaims a new value.
func (s *suite) leadOnce(t *testing.T, ctx context.Context, cand candidate, term *election.Term, value string, ts *terms, reg *fence.Register, resource string) {
	t.Helper()
	l, err := cand.e.Leader(ctx)
	if term.Err() == nil { // still the leader after the read: it must agree
		if err != nil || l.Token != term.Token() || l.Value != value {
			t.Errorf("Leader() = %+v, %v while term %d (value %q) lives", l, err, term.Token(), value)
		}
	}
	s.write(t, term, reg, resource)
	if mrand.IntN(4) == 0 {
		v := value + ", proclaimed"
		ts.proclaimed(term, v)
		before := stateOf(term)
		if err := term.Proclaim(ctx, v); err != nil && !errors.Is(err, errors.ErrUnsupported) && !before.lostBy(err) {
			t.Errorf("Proclaim: %v", err)
		}
	}
}

// termState is a term's state before a call on it, on which the call's
// report of a loss is judged. The term's state after the call cannot
// judge it: a call that reports the term lost ends it (Lock.SetOwner does,
// as a refresh does), so that afterwards any report of a loss, a false one
// from a backend that cannot find its own live grant included, would look
// borne out.
type termState struct {
	err      error     // the term's Err
	deadline time.Time // its local deadline; zero if it has none
}

func stateOf(term *election.Term) termState {
	d, _ := term.Lock().Deadline()
	return termState{err: term.Err(), deadline: d}
}

// lostBy reports whether err, from a call on a term that was in state b
// when the call began, reports the term lost, and the term could indeed
// be: it was lost already, or its local deadline as it stood passed
// during the call. Renewals that came late on a loaded machine end a term
// early, which the contract allows (its context ends before another can be
// elected); the checks of at most one live term at a time still apply to
// it.
func (b termState) lostBy(err error) bool {
	if !errors.Is(err, distlock.ErrLockLost) {
		return false
	}
	return errors.Is(b.err, distlock.ErrLockLost) || (!b.deadline.IsZero() && !time.Now().Before(b.deadline))
}

// write writes as the leader of term through reg: a live term's write must
// be admitted.
func (s *suite) write(t *testing.T, term *election.Term, reg *fence.Register, resource string) {
	t.Helper()
	err := reg.Do(resource, term.Token(), func() error { return nil })
	if errors.Is(err, fence.ErrStaleToken) && term.Err() == nil {
		// A larger token was admitted while this term lived.
		t.Errorf("the fence refused live term %d: %v", term.Token(), err)
	}
}

// checkObserved checks what Observe sent: tokens never decrease; a term
// seen after no leader is a newer one; each term shows a value it had (or
// none, which a backend may show for a moment while it writes a grant's
// value).
func checkObserved(t *testing.T, seen []election.Leader, ts *terms) {
	t.Helper()
	var last uint64 // last term seen
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for i, l := range seen {
		if i > 0 && l == seen[i-1] {
			t.Errorf("Observe sent %+v twice in a row", l)
		}
		if l.Token == 0 {
			continue
		}
		switch {
		case l.Token < last:
			t.Errorf("Observe went back: term %d after term %d", l.Token, last)
		case l.Token == last && i > 0 && seen[i-1].Token == 0:
			t.Errorf("Observe sent term %d again after no leader", l.Token)
		}
		last = l.Token
		if vs, ok := ts.values[l.Token]; ok && l.Value != "" && !contains(vs, l.Value) {
			t.Errorf("Observe: term %d with value %q; the term had %q", l.Token, l.Value, vs)
		} else if !ok && l.Value != "" && !strings.HasPrefix(l.Value, "candidate ") && l.Value != "last" {
			// A Campaign that gave up may have been granted as its context
			// ended; its term was resigned at once, unseen by the test.
			t.Errorf("Observe: term %d with value %q, which no candidate had", l.Token, l.Value)
		}
	}
}

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// Contract: Leader reads the election of exactly its name: an election
// whose name extends it is another.
func (s *suite) testLeaderExactName(t *testing.T) {
	ctx, name := s.ctx(t), s.electionName(t)
	a, b := s.candidate(t, name), s.candidate(t, name+"2", distlock.WithTTL(held))
	if l, err := a.e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader() before any term = %+v, %v; want ErrNoLeader", l, err)
	}
	term, err := b.e.Campaign(ctx, "of the other election")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if l, err := a.e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Errorf("Leader() of %q = %+v, %v while only %q has a leader; want ErrNoLeader", name, l, err, name+"2")
	}
	if l, err := b.e.Leader(ctx); err != nil || l != (election.Leader{Value: "of the other election", Token: term.Token()}) {
		t.Errorf("Leader() of %q = %+v, %v; want term %d", name+"2", l, err, term.Token())
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if l, err := b.e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Errorf("Leader() after Resign = %+v, %v; want ErrNoLeader", l, err)
	}
}

// Contract: Observe sends the current leader, a proclaimed value in the
// same term, no leader after a resignation, and the next term, in order;
// with a backend that watches, each within pushBound.
func (s *suite) testObserve(t *testing.T) {
	ctx, name := s.ctx(t), s.electionName(t)
	// Terms leased for long: the test checks what Observe sends while
	// they live, not how they lapse (see held).
	a, b, o := s.candidate(t, name, distlock.WithTTL(held)), s.candidate(t, name, distlock.WithTTL(held)), s.candidate(t, name)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	ch := o.e.Observe(octx)
	next := func(what string, want func(election.Leader) bool) election.Leader {
		t.Helper()
		timeout := time.After(pushBound + 2*distlock.WatchPoll)
		for {
			select {
			case l, ok := <-ch:
				if !ok {
					t.Fatalf("%s: Observe's channel closed", what)
				}
				if want(l) {
					return l
				}
				// A grant seen before its value was written is the one
				// thing allowed in between.
				if l.Value != "" {
					t.Fatalf("%s: Observe sent %+v", what, l)
				}
			case <-timeout:
				t.Fatalf("%s: nothing from Observe", what)
			}
		}
	}
	next("no leader at first", func(l election.Leader) bool { return l == election.Leader{} })
	ta, err := a.e.Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	next("a's term", func(l election.Leader) bool { return l == election.Leader{Value: "a", Token: ta.Token()} })
	switch err := ta.Proclaim(ctx, "a2"); {
	case errors.Is(err, errors.ErrUnsupported):
		t.Logf("Proclaim: %v", err)
	case err != nil:
		t.Fatalf("Proclaim: %v", err)
	default:
		if ta.Value() != "a2" {
			t.Errorf("Value() after Proclaim = %q", ta.Value())
		}
		next("a's proclaimed value", func(l election.Leader) bool { return l == election.Leader{Value: "a2", Token: ta.Token()} })
		if l, err := b.e.Leader(ctx); err != nil || l.Value != "a2" {
			t.Errorf("Leader() after Proclaim = %+v, %v", l, err)
		}
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	next("no leader after the resignation", func(l election.Leader) bool { return l == election.Leader{} })
	if err := ta.Proclaim(ctx, "a3"); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Proclaim after Resign: %v, want ErrNotHeld", err)
	}
	tb, err := b.e.Campaign(ctx, "b")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if tb.Token() <= ta.Token() {
		t.Errorf("term %d after term %d", tb.Token(), ta.Token())
	}
	next("b's term", func(l election.Leader) bool { return l == election.Leader{Value: "b", Token: tb.Token()} })
	if err := tb.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	next("no leader at the end", func(l election.Leader) bool { return l == election.Leader{} })
	stop()
	for range ch { // closed when octx ends
	}
}

// Contract: a Resign of a term that has ended (lost, or resigned already)
// fails and never ends a later term.
func (s *suite) testResignEndedTerm(t *testing.T) {
	ctx, name := s.ctx(t), s.electionName(t)
	// a's term lapses; b's must live through the checks (see held).
	a, b := s.candidate(t, name), s.candidate(t, name, distlock.WithTTL(held))
	ta, err := a.e.Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	wantErr := distlock.ErrLockLost
	if s.canLapse() {
		s.lose(t, a.f, a.e.Key())
		waitDone(t, ta.Done(), s.lapse(), "lost term")
		a.f.Heal()
	} else {
		// Grants that never lapse end by a resignation only.
		if err := ta.Resign(ctx); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		wantErr = distlock.ErrNotHeld
	}
	tb, err := b.e.Campaign(ctx, "b")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if err := ta.Resign(ctx); !errors.Is(err, wantErr) {
		t.Errorf("Resign of the ended term: %v, want %v", err, wantErr)
	}
	if err := ta.Resign(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Resign again: %v, want %v", err, distlock.ErrNotHeld)
	}
	if err := tb.Err(); err != nil {
		t.Fatalf("the later term ended: %v", err)
	}
	if l, err := a.e.Leader(ctx); err != nil || l.Token != tb.Token() {
		t.Errorf("Leader() = %+v, %v; want the later term %d", l, err, tb.Token())
	}
	if err := tb.Resign(ctx); err != nil {
		t.Errorf("Resign of the later term: %v", err)
	}
}

// Contract: a Campaign whose context ends returns an error matching
// distlock.ErrNotAcquired and the context's error, and no term, and
// leaves nothing behind.
// testCampaignOneTry: with WithWait(false) among its lock options, a
// Campaign tries once: refused with ErrNotAcquired, holding nothing,
// while another leads, and elected at once when nobody does.
func (s *suite) testCampaignOneTry(t *testing.T) {
	ctx, name := s.ctx(t), s.electionName(t)
	a, b := s.candidate(t, name, distlock.WithTTL(held)), s.candidate(t, name)
	once, err := election.New(b.c, name, election.WithLockOptions(distlock.WithTTL(held), distlock.WithWait(false)))
	if err != nil {
		t.Fatalf("election.New: %v", err)
	}
	ta, err := a.e.Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	term, err := once.Campaign(ctx, "b")
	if term != nil || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("one try while another leads = %v, %v; want no term and ErrNotAcquired", term, err)
	}
	if l, err := once.Leader(ctx); err != nil || l.Value != "a" || l.Token != ta.Token() {
		t.Errorf("Leader() after a refused try = %+v, %v; want a's term %d", l, err, ta.Token())
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	term, err = once.Campaign(ctx, "b")
	if err != nil {
		t.Fatalf("one try with no leader: %v", err)
	}
	if term.Token() <= ta.Token() {
		t.Errorf("term %d after term %d", term.Token(), ta.Token())
	}
	if l, err := a.e.Leader(ctx); err != nil || l.Value != "b" || l.Token != term.Token() {
		t.Errorf("Leader() = %+v, %v; want b's term %d", l, err, term.Token())
	}
	if err := term.Resign(ctx); err != nil {
		t.Errorf("Resign: %v", err)
	}
}

func (s *suite) testCampaignContextEnds(t *testing.T) {
	ctx, name := s.ctx(t), s.electionName(t)
	a, b := s.candidate(t, name, distlock.WithTTL(held)), s.candidate(t, name, distlock.WithTTL(held))
	ta, err := a.e.Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	expired, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"while another leads, deadline", expired, context.DeadlineExceeded},
		{"already cancelled", cancelled, context.Canceled},
	} {
		term, err := b.e.Campaign(tc.ctx, "b")
		if term != nil || !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, tc.want) {
			t.Errorf("%s: Campaign = %v, %v; want no term and ErrNotAcquired with %v", tc.name, term, err, tc.want)
		}
	}
	if err := ta.Err(); err != nil {
		t.Fatalf("the leader's term ended: %v", err)
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	// The given-up campaigns hold nothing: the election is free.
	if l, err := a.e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Errorf("Leader() = %+v, %v; want ErrNoLeader", l, err)
	}
	term, err := b.e.Campaign(cancelled, "b")
	if term != nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Campaign with a cancelled context and no leader = %v, %v; want no term", term, err)
	}
	if l, err := a.e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Errorf("Leader() = %+v, %v; want ErrNoLeader", l, err)
	}
}

// Contract: Run leads while fn runs, resigns when it returns, campaigns
// again after fn returns nil, returns fn's error, and returns when its
// context ends.
func (s *suite) testRun(t *testing.T) {
	ctx, name := s.ctx(t), s.electionName(t)
	a := s.candidate(t, name)
	var tokens []uint64
	errStop := errors.New("enough")
	err := election.Run(ctx, a.e, "a", func(ctx context.Context, term *election.Term) error {
		if ctx.Err() != nil {
			t.Errorf("fn's context ended at once: %v", context.Cause(ctx))
		}
		tokens = append(tokens, term.Token())
		if len(tokens) == 3 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Errorf("Run = %v, want fn's error", err)
	}
	checkIncreasing(t, "Run's terms", tokens)
	if l, err := a.e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Errorf("Leader() after Run = %+v, %v; want ErrNoLeader", l, err)
	}

	// Ended by its context, while fn leads.
	rctx, cancel := context.WithCancel(ctx)
	led := make(chan uint64, 1)
	done := make(chan error, 1)
	go func() {
		done <- election.Run(rctx, a.e, "a", func(ctx context.Context, term *election.Term) error {
			led <- term.Token()
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	select {
	case <-led:
	case <-time.After(s.lapse()):
		t.Fatal("Run did not lead")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run after its context ended = %v, want context.Canceled", err)
		}
	case <-time.After(s.lapse()):
		t.Fatal("Run did not return after its context ended")
	}
	if l, err := a.e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Errorf("Leader() after Run = %+v, %v; want ErrNoLeader", l, err)
	}
}
