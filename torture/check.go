package torture

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Expect is what a scenario is expected to show on a backend.
type Expect int

// Expectations.
const (
	// ExpectBite: the fault must show in the unfenced baseline (an
	// overlap, a stale write accepted, a lost update, a token regression
	// or an orphaned grant); the fenced run must accept no stale write.
	ExpectBite Expect = iota
	// ExpectHold: the guard under test must hold in both runs: no
	// overlap, no token regression, no orphan, and no stale write
	// accepted.
	ExpectHold
	// ExpectNothing: the fault does not apply to the backend (say why);
	// the run shows what happens instead.
	ExpectNothing
)

// String names the expectation.
func (e Expect) String() string {
	switch e {
	case ExpectBite:
		return "bite"
	case ExpectHold:
		return "hold"
	}
	return "n/a"
}

// Result is what the checkers found in one Run. It is plain data: not safe
// for concurrent modification.
type Result struct {
	Backend  string
	Scenario string
	Variant  string
	Mode     Mode
	Expect   Expect
	Why      string // for ExpectNothing, or a remark on the row
	Rounds   int

	// Porcupine's verdicts per model ("" when the history had no
	// operation for the model) and the number of histories (partitions:
	// one per model and key or resource) checked.
	Verdicts  map[string]porcupine.CheckResult
	Histories int

	Grants           int
	Writes           int
	Overlaps         int // pairs of grants of one key proven held at the same time
	StaleAttempted   int // writes with a token below the highest admitted
	StaleRefused     int
	StaleAccepted    int
	LostUpdates      int // acknowledged increments missing from the final values
	TokenRegressions int // grants whose token is not above every earlier grant's
	Orphans          int // grants left behind by a failed acquire (set by the scenario)
	// UnendedLateWrites counts late writes of a paused leader whose term's
	// local deadline, as it stood when the leader was stopped, did not come
	// before another candidate's Campaign returned: the term's promise
	// (ended before another is elected) not shown (set by the scenario).
	UnendedLateWrites int
	// ObserveViolations counts what an observer of an election row got
	// wrong: a leader out of term order (a lower token after a higher
	// one), a leader with no value or the value of another candidate than
	// the term's, a term no grant of the run has, a standing leader never
	// reported, or no "no leader" after the last resignation (set by the
	// scenario).
	ObserveViolations int
	// StaleReads counts reads under a read lock that saw a write with a
	// token above the reader's own (a writer granted after the read lock
	// ended), used by the reader as read under its lock; StaleReadsDiscarded
	// those the reader discarded after validating against the store's fence
	// (set by the scenario).
	StaleReads          int
	StaleReadsDiscarded int
	// UnendedReads counts late reads of a paused reader whose read lock's
	// local deadline, as it stood when the reader was stopped, did not
	// come before the writer's Acquire returned (set by the scenario).
	UnendedReads int
	// Effective is the number of rounds in which the fault took effect as
	// designed (the other holder was granted during the pause, the delayed
	// write landed after the newer ones, the lost reply's request was
	// executed, ...).
	Effective int
	Detection []time.Duration

	Notes []string
	Ops   []Op // the full history, End operations included
	// Visualization is the path of porcupine's page for the run, if made.
	Visualization string
}

// Violations is the number of safety (and orphan) violations found.
func (r *Result) Violations() int {
	return r.Overlaps + r.StaleAccepted + r.LostUpdates + r.TokenRegressions + r.Orphans +
		r.UnendedLateWrites + r.ObserveViolations + r.StaleReads + r.UnendedReads
}

// Illegal reports whether porcupine found some history not linearizable.
func (r *Result) Illegal() bool {
	for _, v := range r.Verdicts {
		if v == porcupine.Illegal {
			return true
		}
	}
	return false
}

// Bit reports whether the fault showed: a violation or an illegal history.
func (r *Result) Bit() bool { return r.Violations() > 0 || r.Illegal() }

// Outcome summarizes the row in words, honestly: a baseline that shows
// nothing is "fault did not bite", never a pass.
func (r *Result) Outcome() string {
	switch {
	case r.Expect == ExpectNothing:
		if r.Bit() {
			return "not applicable, yet violations: " + r.violationText()
		}
		return "fault did not bite (not applicable)"
	case r.Expect == ExpectHold && r.Bit():
		return "VIOLATION: " + r.violationText()
	case r.Expect == ExpectHold:
		return "guard holds"
	case r.Mode == Unfenced && r.Bit():
		return "bites: " + r.violationText()
	case r.Mode == Unfenced:
		return "FAULT DID NOT BITE"
	case r.StaleAccepted > 0 || r.StaleReads > 0:
		return "FENCE FAILED: " + r.violationText()
	case r.Bit():
		return "fence holds (0 stale accepted); still: " + r.violationText()
	}
	return "fence holds"
}

func (r *Result) violationText() string {
	var s []string
	add := func(n int, what string) {
		if n > 0 {
			s = append(s, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(r.Overlaps, "overlapping holds")
	add(r.StaleAccepted, "stale writes accepted")
	add(r.LostUpdates, "lost updates")
	add(r.TokenRegressions, "token regressions")
	add(r.Orphans, "orphaned grants")
	add(r.UnendedLateWrites, "late writes under a term whose deadline came after another's election")
	add(r.ObserveViolations, "observer errors (a leader out of term order, with no value or another's, of a term no grant has, a leader or its end never reported)")
	add(r.StaleReads, "stale reads used under a read lock")
	add(r.UnendedReads, "late reads under a read lock whose deadline came after the writer's grant")
	for _, k := range modelKinds {
		if r.Verdicts[string(k)] == porcupine.Illegal {
			s = append(s, string(k)+" model illegal")
		}
	}
	if len(s) == 0 {
		return "none"
	}
	out := s[0]
	for _, x := range s[1:] {
		out += ", " + x
	}
	return out
}

// CheckTimeout bounds each porcupine check; a check that runs out of time
// reports porcupine.Unknown.
const CheckTimeout = 30 * time.Second

// Check closes the Run if needed and checks its History: porcupine's three
// models and the counts. visPath, when not empty, receives porcupine's
// visualization of the whole history.
func (r *Run) Check(res *Result, visPath string) *Result {
	r.Close()
	r.mu.Lock()
	endAt := r.endAt
	grants := slices.Clone(r.grants)
	samples := slices.Clone(r.samples)
	res.Effective = r.injected
	res.Notes = append(res.Notes, r.notes...)
	r.mu.Unlock()

	for _, g := range grants {
		end := Op{Worker: g.worker, Kind: KindEnd, Key: g.key, Grant: g.id, Token: g.token, Shared: g.shared,
			Call: max(g.acqCall, g.live), Return: endAt, Outcome: OutcomeOK, Note: "not ended before the run closed"}
		if g.endAt > 0 {
			end.Return, end.Note = g.endAt, g.cause
			if g.lost {
				end.Outcome = OutcomeLost
			}
		}
		end.Return = max(end.Return, end.Call)
		r.Hist.Add(end)
	}
	ops := r.Hist.Ops()
	res.Ops = ops
	res.Detection = samples

	clients := map[string]int{}
	for _, op := range ops {
		if _, ok := clients[op.Worker]; !ok && op.Worker != "harness" {
			clients[op.Worker] = len(clients)
		}
	}
	res.Verdicts, res.Histories = modelVerdicts(ops, clients, r.lockModelsOmit)
	if visPath != "" {
		all := operations(ops, modelKinds, clients)
		_, info := porcupine.CheckOperationsVerbose(model, all, CheckTimeout)
		var notes []porcupine.Annotation
		for _, op := range ops {
			if op.Kind == KindFault {
				notes = append(notes, porcupine.Annotation{Tag: "faults", Start: op.Call, End: op.Return,
					Description: op.Worker + ": " + op.Note, BackgroundColor: "#ffd7d7"})
			}
		}
		info.AddAnnotations(notes)
		if err := writeVisualization(model, info, visPath); err == nil {
			res.Visualization = visPath
		} else {
			res.Notes = append(res.Notes, "visualization failed: "+err.Error())
		}
	}

	// Counts from the store's records.
	res.countWrites(ops)
	acked := map[string]int{}
	for _, op := range ops {
		if op.Kind != KindWrite {
			continue
		}
		if op.Acked {
			acked[op.Key]++
		}
	}
	for resource, n := range acked {
		if lost := int64(n) - r.Store.Value(resource); lost > 0 {
			res.LostUpdates += int(lost)
		}
	}

	// Counts from the grants.
	res.Grants = len(grants)
	views := make([]grantView, len(grants))
	for i, g := range grants {
		views[i] = grantView{key: g.key, shared: g.shared, token: g.token, call: g.acqCall, ret: g.acqReturn, live: g.live, name: g.String}
	}
	res.grantCounts(views)
	return res
}

// countWrites adds to res the writes of ops and their stale ones:
// attempted, refused by the fence, accepted.
func (res *Result) countWrites(ops []Op) {
	for _, op := range ops {
		if op.Kind != KindWrite {
			continue
		}
		res.Writes++
		if op.Stale {
			res.StaleAttempted++
			if op.Outcome == OutcomeStale {
				res.StaleRefused++
			} else {
				res.StaleAccepted++
			}
		}
	}
}

// grantView is a grant as the counts from the grants see it: its key,
// token, acquire call and return, the latest instant it was proven live,
// and how a note names it.
type grantView struct {
	key             string
	shared          bool
	token           uint64
	call, ret, live int64
	name            func() string
}

// grantCounts adds to res the counts from gs, in grant order: the token
// regressions and the proven overlaps, with a note for each overlap.
func (res *Result) grantCounts(gs []grantView) {
	for i, g := range gs {
		regressed := false
		for j, h := range gs {
			if i == j || g.key != h.key {
				continue
			}
			// A token handed out twice counts once, on the later grant.
			if (h.token == g.token && j < i) || (h.ret < g.call && h.token > g.token) {
				regressed = true
			}
			// Proven overlap: both were granted, and both proven live
			// afterwards, at a common instant (two read locks may).
			if j > i && !(g.shared && h.shared) && max(g.ret, h.ret) < min(g.live, h.live) {
				res.Overlaps++
				res.Notes = append(res.Notes, fmt.Sprintf("overlap: %s and %s", g.name(), h.name()))
			}
		}
		if regressed {
			res.TokenRegressions++
		}
	}
}

// modelVerdicts runs each model over ops (the lock models without the
// keys with prefix omit, if set) and returns their verdicts and the
// number of partitioned histories checked.
func modelVerdicts(ops []Op, clients map[string]int, omit string) (map[string]porcupine.CheckResult, int) {
	verdicts, histories := map[string]porcupine.CheckResult{}, 0
	for _, k := range modelKinds {
		mops := ops
		if k != modelRegister && omit != "" {
			mops = slices.DeleteFunc(slices.Clone(ops), func(op Op) bool { return strings.HasPrefix(op.Key, omit) })
		}
		pops := operations(mops, []modelKind{k}, clients)
		if len(pops) == 0 {
			continue
		}
		histories += len(partition(pops))
		verdicts[string(k)] = porcupine.CheckOperationsTimeout(model, pops, CheckTimeout)
	}
	return verdicts, histories
}

// Percentile returns the p-th percentile (0..100) of ds, by the nearest
// rank; 0 if ds is empty.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
