package redlock

// An exhaustive check of the protocol in the small: every interleaving of
// the steps of two clients over three nodes (requests delivered late or
// never, replies lost, grants expiring, a node crashing and restarting
// without its data), with the decisions taken by the backend's own
// functions (countVotes, pickToken) and the nodes' scripts mirrored by
// modelNode (tied to the real scripts by TestModelNodeMatchesScripts). In
// every reachable state, tokens increase in the order grants are handed
// out and no two handed-out grants are valid at once; dropping any of the
// stated assumptions makes the checker find a counterexample.

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The model: three nodes, and three attempts by two clients (two by the
// first, one by the second), enough for each counterexample below.
const (
	mNodes    = 3
	mAttempts = 3
	mMaj      = mNodes/2 + 1
)

// maxModelStates bounds an exploration; reaching it fails the test (the
// check would no longer be exhaustive).
const maxModelStates = 20_000_000

// clientOf is the client of each attempt; a client's attempts run one
// after the other.
var clientOf = [mAttempts]int{0, 0, 1}

// variant drops one assumption of the package documentation.
type variant struct {
	name        string
	noMarker    bool // a node restarted empty votes at once
	delayOnly   bool // it waits, but is not re-seeded (counters restart at 0)
	noRaise     bool // T is handed out without a majority at T
	copyAtOnce  bool // its counters are copied before the rounds under way at its crash are decided
	noReconfirm bool // the raising round counts the votes at T instead of confirming them
	maxCrashes  int
	attempts    int // how many of the attempts of clientOf run
	// skew starts node 0's counter one ahead of the others, as an
	// earlier attempt that only it counted leaves it: with two attempts,
	// the raising round then runs (a third attempt to skew the counters
	// is more than the checker can hold).
	skew bool
	// wantFindings says that the variant breaks the protocol: the checker
	// must find a counterexample.
	wantFindings bool
}

// Seed states of a model node, as its marker says.
const (
	seedOK      = iota
	seedNone    // no marker
	seedPending // "p:...": waits for the copy of its counters
	seedCopied  // "c:...": copied, waits to vote
)

// modelNode mirrors one Redis node's keys for one lock key and the
// scripts run on it.
type modelNode struct {
	holder  int8   // attempt id holding the lock key, or -1
	holderT int8   // the token recorded in the lock value
	counter int8   // the key's counter
	tombs   uint16 // attempt ids with a tombstone
	seed    int8
}

// acquire mirrors acquire.lua for attempt id.
func (n *modelNode) acquire(id int) (status, val int64) {
	switch n.seed {
	case seedNone:
		return voteUnseeded, 0
	case seedPending:
		return votePending, 1
	case seedCopied:
		return voteCopied, 1
	}
	if n.holder >= 0 {
		if int(n.holder) == id {
			return voteGranted, int64(n.holderT)
		}
		return voteHeld, 1
	}
	if n.tombs&(1<<id) != 0 {
		return voteTooLate, 0
	}
	n.counter++
	n.holder, n.holderT = int8(id), n.counter
	return voteGranted, int64(n.counter)
}

// raise mirrors raise.lua.
func (n *modelNode) raise(id int, T int64) int64 {
	if int(n.holder) != id {
		return nodeGone
	}
	n.counter = max(n.counter, int8(T))
	n.holderT = int8(T)
	return nodeKept
}

// release mirrors release.lua.
func (n *modelNode) release(id int, force bool) int64 {
	if int(n.holder) == id {
		n.holder = -1
		n.tombs |= 1 << id
		return releaseReleased
	}
	if force {
		n.tombs |= 1 << id
		return releaseNotHeld
	}
	if n.tombs&(1<<id) != 0 {
		return releaseAlreadyReleased
	}
	return releaseNotHeld
}

// Phases of an attempt.
const (
	phIdle = iota
	phVoting
	phRaising
	phHeld // handed out, valid
	phOver // handed out and ended (released, or expired), or abandoned
	phAbandoned
)

// Message states of one request of an attempt to one node.
const (
	msgNone     = iota
	msgInFlight // sent, not delivered
	msgReply    // delivered, reply on its way
	msgGot      // the client has the reply
	msgLate     // the client gave up; the request is still in flight
	msgGaveUp   // the client gave up; the request is delivered or dropped
)

type attempt struct {
	phase   int8
	req     [mNodes]int8 // acquire (phVoting) or raise (phRaising) requests
	val     [mNodes]vote
	T       int64
	below   uint8        // nodes sent a raise
	rel     [mNodes]int8 // release / clean-up requests: msgInFlight or msgNone
	relHard bool         // the clean-up (force) rather than a release
}

type mstate struct {
	nodes   [mNodes]modelNode
	att     [mAttempts]attempt
	last    int64 // highest token handed out
	crashes int8
	// per node: the attempts not finished at its crash, which its wait
	// outlasts (bit per attempt id)
	waitFor [mNodes]uint16
	// per node and attempt: the phase of the attempt at the node's crash
	// when a round of it was under way (phVoting, phRaising), else 0.
	// The copy of the node's counters comes after those rounds are
	// decided: in the package, the replies that settle a token come
	// within settleWindow of their round's first request, and the copy
	// no earlier than that after the crash.
	roundAt [mNodes][mAttempts]int8
}

// finished reports whether attempt id has been handed out and ended, or
// abandoned: the wait of a node covers it then.
func (s *mstate) finished(id int) bool {
	p := s.att[id].phase
	return p == phIdle || p == phOver || p == phAbandoned
}

// forget clears what no step reads any more, so that states that differ
// only there are explored once: a crash's record of an attempt that has
// moved on (its round decided, or the attempt finished), and both records
// of a node that votes.
func (s *mstate) forget() {
	for i := range s.nodes {
		for id := range s.att {
			if p := s.roundAt[i][id]; p != 0 && (s.att[id].phase != p || s.nodes[i].seed == seedOK) {
				s.roundAt[i][id] = 0
			}
			if s.waitFor[i]&(1<<id) != 0 && (s.finished(id) || s.nodes[i].seed == seedOK) {
				s.waitFor[i] &^= 1 << id
			}
		}
	}
}

// checker explores every state reachable under v.
type checker struct {
	v        variant
	seen     map[mstate]bool
	findings []string
	states   int
}

func (c *checker) run() {
	var init mstate
	for i := range init.nodes {
		init.nodes[i].holder = -1
	}
	if c.v.skew {
		init.nodes[0].counter = 1
	}
	if c.v.attempts == 0 {
		c.v.attempts = mAttempts
	}
	c.seen = map[mstate]bool{}
	stack := []mstate{init}
	c.seen[init] = true
	for len(stack) > 0 && len(c.findings) == 0 && c.states < maxModelStates {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		c.states++
		for _, next := range c.successors(&s) {
			if !c.seen[next] {
				c.seen[next] = true
				stack = append(stack, next)
			}
		}
	}
}

func (c *checker) successors(s *mstate) []mstate {
	var out []mstate
	add := func(f func(n *mstate) bool) {
		n := *s
		if f(&n) {
			n.forget()
			out = append(out, n)
		}
	}
	for id := range s.att {
		a := &s.att[id]
		// Start: the client's previous attempt is over.
		prev := -1
		for p := id - 1; p >= 0; p-- {
			if clientOf[p] == clientOf[id] {
				prev = p
				break
			}
		}
		if a.phase == phIdle && id < c.v.attempts && (prev < 0 || s.finished(prev) && s.att[prev].phase != phIdle) {
			add(func(n *mstate) bool {
				n.att[id].phase = phVoting
				for i := range n.att[id].req {
					n.att[id].req[i] = msgInFlight
				}
				return true
			})
		}
		for i := range mNodes {
			// Deliveries of acquire or raise requests, in flight or late.
			if r := a.req[i]; r == msgInFlight || r == msgLate {
				add(func(n *mstate) bool {
					na := &n.att[id]
					var v vote
					if na.phase == phRaising {
						v = vote{status: n.nodes[i].raise(id, na.T)}
					} else {
						st, val := n.nodes[i].acquire(id)
						v = vote{status: st, val: val}
					}
					if r == msgInFlight {
						na.req[i], na.val[i] = msgGot, v
					} else {
						na.req[i] = msgGaveUp
					}
					return true
				})
				// A late request may also be lost for good.
				if r == msgLate {
					add(func(n *mstate) bool { n.att[id].req[i] = msgGaveUp; return true })
				}
			}
			// Timeout: the client gives up on a request (delivered later,
			// or never: a lost request or a lost reply).
			if a.req[i] == msgInFlight {
				add(func(n *mstate) bool { n.att[id].req[i] = msgLate; return true })
			}
		}
		// Releases and clean-ups reach any subset of their nodes (the
		// grant expires on the others), all at once.
		if a.rel != ([mNodes]int8{}) {
			for subset := range 1 << mNodes {
				add(func(n *mstate) bool {
					for i := range mNodes {
						if n.att[id].rel[i] == msgInFlight && subset&(1<<i) != 0 {
							n.nodes[i].release(id, n.att[id].relHard)
						}
						n.att[id].rel[i] = msgNone
					}
					return true
				})
			}
		}
		if a.phase == phVoting || a.phase == phRaising {
			decided := true
			for i := range mNodes {
				if a.phase == phRaising && a.below&(1<<i) == 0 {
					continue
				}
				if r := a.req[i]; r == msgInFlight || r == msgReply {
					decided = false
				}
			}
			if decided {
				add(func(n *mstate) bool { return c.decide(n, id) })
			}
		}
		if a.phase == phHeld {
			// Release: to every node.
			add(func(n *mstate) bool {
				n.att[id].phase = phOver
				for i := range n.att[id].rel {
					n.att[id].rel[i] = msgInFlight
				}
				n.att[id].relHard = false
				return true
			})
		}
	}
	for i := range mNodes {
		nd := &s.nodes[i]
		// Expiry: a grant lapses only once its attempt no longer counts
		// on it (handed out, or abandoned); the validity check keeps the
		// voters' grants alive until the hand-out. A handed-out grant
		// expiring ends its validity.
		if h := nd.holder; h >= 0 && s.att[h].phase >= phHeld {
			add(func(n *mstate) bool {
				n.nodes[i].holder = -1
				if n.att[h].phase == phHeld {
					n.att[h].phase = phOver
				}
				return true
			})
		}
		// Crash and restart without the data.
		if int(s.crashes) < c.v.maxCrashes {
			add(func(n *mstate) bool {
				n.crashes++
				n.nodes[i] = modelNode{holder: -1, seed: seedNone}
				if c.v.noMarker {
					n.nodes[i].seed = seedOK
				}
				n.waitFor[i] = 0
				for id := range n.att {
					if !n.finished(id) {
						n.waitFor[i] |= 1 << id
					}
					n.roundAt[i][id] = 0
					if p := n.att[id].phase; p == phVoting || p == phRaising {
						n.roundAt[i][id] = p
					}
				}
				return true
			})
		}
		switch nd.seed {
		case seedNone:
			// Marked waiting by a round that hears a node with a marker.
			add(func(n *mstate) bool {
				for j := range mNodes {
					if j != i && n.nodes[j].seed != seedNone {
						n.nodes[i].seed = seedPending
						return true
					}
				}
				return false
			})
		case seedPending:
			// Copied from a majority of the nodes that have their
			// counters (marked "ok" or copied), once the rounds under way
			// at the crash are decided.
			add(func(n *mstate) bool {
				for id, p := range n.roundAt[i] {
					if p != 0 && n.att[id].phase == p && !c.v.copyAtOnce {
						return false
					}
				}
				var hi int8
				sources := 0
				for j := range mNodes {
					if s := n.nodes[j].seed; j != i && (s == seedOK || s == seedCopied) {
						sources++
						hi = max(hi, n.nodes[j].counter)
					}
				}
				if sources < mMaj {
					return false
				}
				if !c.v.delayOnly {
					n.nodes[i].counter = max(n.nodes[i].counter, hi)
				}
				n.nodes[i].seed = seedCopied
				return true
			})
		case seedCopied:
			// It votes once its wait outlasted every attempt unfinished
			// at the crash.
			add(func(n *mstate) bool {
				for id := range n.att {
					if n.waitFor[i]&(1<<id) != 0 && !n.finished(id) {
						return false
					}
				}
				n.nodes[i].seed = seedOK
				return true
			})
		}
	}
	return out
}

// decide is the client's decision once every node of its round answered
// or timed out, with the backend's functions.
func (c *checker) decide(n *mstate, id int) bool {
	a := &n.att[id]
	if a.phase == phVoting {
		votes := make([]reply[vote], mNodes)
		for i := range mNodes {
			if a.req[i] == msgGot {
				votes[i].val = a.val[i]
			} else {
				votes[i].err = errModelTimeout
			}
		}
		r := countVotes(votes)
		if len(r.granted) >= mMaj {
			T, enough := pickToken(votes, r.granted, mMaj)
			a.T = T
			if enough || c.v.noRaise {
				return c.handOut(n, id)
			}
			// The raising round goes to every voter: it raises or
			// confirms each.
			a.phase = phRaising
			a.below = 0
			for i := range a.req {
				a.req[i] = msgNone
			}
			for _, i := range r.granted {
				if c.v.noReconfirm && votes[i].val.val == T {
					// the vote at T counts as it is
					a.val[i] = vote{status: nodeKept}
					a.req[i] = msgGot
					continue
				}
				a.below |= 1 << i
				a.req[i] = msgInFlight
			}
			return true
		}
		c.abandon(n, id, votes)
		return true
	}
	// Raising: count the voters at T and the raised ones. A raise still
	// on its way is dropped: it changes nothing once the grant is
	// settled or abandoned (it is owner-checked).
	for i := range a.req {
		if a.req[i] == msgLate {
			a.req[i] = msgGaveUp
		}
	}
	at := 0
	for i := range mNodes {
		if a.req[i] == msgGot && a.val[i].status == nodeKept {
			at++
		}
	}
	if at >= mMaj {
		return c.handOut(n, id)
	}
	votes := make([]reply[vote], mNodes)
	for i := range votes {
		votes[i].val.status = voteGranted // clean up everywhere it voted
	}
	c.abandon(n, id, votes)
	return true
}

var errModelTimeout = fmt.Errorf("timeout")

// abandon is Backend.abandon: a forced release to the nodes that granted
// or did not answer.
func (c *checker) abandon(n *mstate, id int, votes []reply[vote]) {
	a := &n.att[id]
	a.phase = phAbandoned
	a.relHard = true
	a.T, a.below = 0, 0
	defer func() { a.val = [mNodes]vote{} }()
	for i, v := range votes {
		if v.err != nil || v.val.status == voteGranted {
			a.rel[i] = msgInFlight
		}
	}
	for i := range a.req {
		if a.req[i] == msgInFlight {
			a.req[i] = msgLate
		} else if a.req[i] != msgLate {
			a.req[i] = msgGaveUp
		}
	}
}

// handOut hands attempt id's token out, checking the invariants.
func (c *checker) handOut(n *mstate, id int) bool {
	a := &n.att[id]
	for other := range n.att {
		if other != id && n.att[other].phase == phHeld {
			c.findings = append(c.findings, fmt.Sprintf("attempt %d handed token %d out while attempt %d (token %d) holds the lock", id, a.T, other, n.att[other].T))
		}
	}
	if a.T <= n.last {
		c.findings = append(c.findings, fmt.Sprintf("attempt %d handed token %d out after token %d", id, a.T, n.last))
	}
	n.last = max(n.last, a.T)
	a.phase = phHeld
	a.val, a.below = [mNodes]vote{}, 0
	for i := range a.req {
		if a.req[i] == msgInFlight {
			a.req[i] = msgLate
		} else if a.req[i] != msgLate {
			a.req[i] = msgGaveUp
		}
	}
	return true
}

// TestModelExhaustive takes minutes (millions of states; more under
// -race): it runs when DISTLOCK_MODEL is set, e.g.
// DISTLOCK_MODEL=1 go test -run TestModelExhaustive ./redlock/.
func TestModelExhaustive(t *testing.T) {
	if os.Getenv("DISTLOCK_MODEL") == "" {
		t.Skip("set DISTLOCK_MODEL=1 to explore every interleaving (minutes)")
	}
	for _, v := range []variant{
		{name: "as documented", maxCrashes: 1, attempts: 2},
		{name: "as documented, no crash", attempts: 2},
		{name: "no raising round", noRaise: true, wantFindings: true},
		{name: "restart votes at once", noMarker: true, maxCrashes: 1, attempts: 2, wantFindings: true},
		{name: "delayed restart without re-seeding", delayOnly: true, maxCrashes: 1, attempts: 2, wantFindings: true},
		{name: "copy before the rounds under way are decided", copyAtOnce: true, maxCrashes: 1, attempts: 2, wantFindings: true},
		{name: "as documented, counters skewed", maxCrashes: 1, attempts: 2, skew: true},
		{name: "raising round without confirmation", noReconfirm: true, maxCrashes: 1, attempts: 2, skew: true, wantFindings: true},
	} {
		t.Run(strings.ReplaceAll(v.name, " ", "_"), func(t *testing.T) {
			c := &checker{v: v}
			c.run()
			t.Logf("%d states explored", c.states)
			if c.states >= maxModelStates {
				t.Fatalf("stopped after %d states: not exhaustive", c.states)
			}
			switch {
			case v.wantFindings && len(c.findings) == 0:
				t.Errorf("no counterexample without the assumption: the checker cannot tell it is needed")
			case v.wantFindings:
				t.Logf("counterexample: %s", c.findings[0])
			case len(c.findings) > 0:
				t.Errorf("counterexample: %s", c.findings[0])
			}
		})
	}
}
