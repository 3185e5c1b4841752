package torture

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Detection times of the nemesis mode: for each fault that cut a holder
// off while it held, how long its library took to report the lock lost,
// and how long until another worker was granted the lock.

// NemesisCutoff is one grant cut off by a fault: the fault of Kind that
// started (for a clock jump: stepped the clock forward) while Worker held
// the lock, the latest such fault before the grant was lost. Loss is the
// time from the fault to the holder's report that the lock was lost (its
// lock context ending with ErrLockLost, or its release finding the lock
// lost), Grant the time from the fault to the next grant of the key to
// another worker; either is negative when it did not happen in the run.
type NemesisCutoff struct {
	Kind   string
	Worker string
	Key    string
	Loss   time.Duration
	Grant  time.Duration
}

// nemesisCutKinds are the fault kinds that may cut a holder off: the
// holder stopped or without its lock service's replies, a server stopped,
// killed, or its clock stepped forward. Delays only slow a holder down.
var nemesisCutKinds = []string{NemesisHolderPause, NemesisLockCut, NemesisLostReply,
	NemesisServerPause, NemesisServerKill, NemesisServerClockJump, NemesisServerPeerCut, NemesisServerLinkCut,
	NemesisServerLeaderStall}

// nemesisFault is a fault of a run as the detection times see it: its
// kind, the moment it could first cut a holder off (on the run's Clock),
// and the workers it cuts off (nil: every worker, for a server's fault).
type nemesisFault struct {
	kind    string
	at      int64
	workers []string
}

// nemesisCut returns the fault that the start (or end) of e makes, if it
// may cut a holder off: the start of a holder's or a server's fault, and
// the step forward of a clock jump (its start, or the end of a jump back).
func nemesisCut(e NemesisEvent, start bool, ws []*nemesisWorker, at int64) (nemesisFault, bool) {
	if !slices.Contains(nemesisCutKinds, e.Kind) {
		return nemesisFault{}, false
	}
	f := nemesisFault{kind: e.Kind, at: at}
	switch e.Kind {
	case NemesisServerClockJump:
		return f, start == (e.Jump > 0)
	case NemesisServerPause, NemesisServerKill, NemesisServerPeerCut, NemesisServerLinkCut, NemesisServerLeaderStall:
		return f, start
	}
	if e.Target >= 0 && e.Target < len(ws) {
		f.workers = []string{ws[e.Target].w.Name}
	}
	return f, start && f.workers != nil
}

// nemesisGrant is a grant as the history shows it.
type nemesisGrant struct {
	id              int
	worker, key     string
	shared          bool
	token           uint64
	acqCall, acqRet int64
	live            int64 // the End op's call: the latest moment proven live
	end             int64 // when the holder stopped holding (its release, or the end's report); -1: never
	lostAt          int64 // when the holder's library reported the loss; 0: never
	part            bool  // a part of a lock set
}

// nemesisGrants collects the grants of a checked history (End ops
// included), in grant order.
func nemesisGrants(ops []Op) []*nemesisGrant {
	byID := map[int]*nemesisGrant{}
	var gs []*nemesisGrant
	for _, op := range ops {
		if op.Kind == KindAcquire && op.Outcome == OutcomeOK && op.Grant > 0 {
			g := &nemesisGrant{id: op.Grant, worker: op.Worker, key: op.Key, shared: op.Shared, token: op.Token, acqCall: op.Call, acqRet: op.Return, live: op.Return, end: -1,
				part: strings.HasPrefix(op.Note, setPartNote)}
			byID[op.Grant] = g
			gs = append(gs, g)
		}
	}
	lost := func(g *nemesisGrant, at int64) {
		if g.lostAt == 0 || at < g.lostAt {
			g.lostAt = at
		}
	}
	for _, op := range ops {
		g := byID[op.Grant]
		if g == nil {
			continue
		}
		switch op.Kind {
		case KindEnd:
			g.live = op.Call
			if g.end < 0 || op.Return < g.end {
				g.end = op.Return
			}
			if op.Outcome == OutcomeLost {
				lost(g, op.Return)
			}
		case KindRelease:
			if g.end < 0 || op.Call < g.end {
				g.end = op.Call
			}
			if op.Outcome == OutcomeLost {
				lost(g, op.Return)
			}
		}
	}
	sort.SliceStable(gs, func(i, j int) bool { return gs[i].id < gs[j].id })
	return gs
}

// nemesisCutoffs finds the grants cut off by faults: a grant is cut off
// when its holder's library reported it lost, or another worker was
// granted its key before it ended; the fault blamed is the latest one
// that reached the holder after its grant and before the first of those.
// A grant that no fault reached is not counted (its loss, if any, has
// another cause, such as a delay), nor is a lock set's part.
func nemesisCutoffs(ops []Op, faults []nemesisFault) []NemesisCutoff {
	gs := nemesisGrants(ops)
	var out []NemesisCutoff
	for _, g := range gs {
		if g.part {
			// A fault that cuts a set off cuts off each of its parts:
			// counted per part, it would weigh two or three times, and
			// the next grant of a set's own keys waits for the other set
			// worker to draw them. The parts are next grants of others.
			continue
		}
		var next *nemesisGrant // the first grant of the key to another worker after g's
		for _, h := range gs {
			if h.key == g.key && h.worker != g.worker && h.acqRet > g.acqRet && (next == nil || h.acqRet < next.acqRet) {
				next = h
			}
		}
		cut := int64(-1) // when g was cut off
		if g.lostAt > 0 {
			cut = g.lostAt
		}
		if next != nil && (g.end < 0 || next.acqRet < g.end) && (cut < 0 || next.acqRet < cut) {
			cut = next.acqRet
		}
		if cut < 0 {
			continue
		}
		var blamed *nemesisFault
		for i := range faults {
			f := &faults[i]
			if f.at < g.acqRet || f.at > cut || (g.end >= 0 && f.at > g.end) || (f.workers != nil && !slices.Contains(f.workers, g.worker)) {
				continue
			}
			if blamed == nil || f.at >= blamed.at {
				blamed = f
			}
		}
		if blamed == nil {
			continue
		}
		c := NemesisCutoff{Kind: blamed.kind, Worker: g.worker, Key: g.key, Loss: -1, Grant: -1}
		if g.lostAt > 0 {
			c.Loss = time.Duration(g.lostAt - blamed.at)
		}
		// The next grant to another worker after the fault (not after
		// g's: with overlapping faults another may have come between).
		var after *nemesisGrant
		for _, h := range gs {
			if h.key == g.key && h.worker != g.worker && h.acqRet >= blamed.at && (after == nil || h.acqRet < after.acqRet) {
				after = h
			}
		}
		if after != nil {
			c.Grant = time.Duration(after.acqRet - blamed.at)
		}
		out = append(out, c)
	}
	return out
}

// nemesisClockOverlaps counts the proven overlaps (pairs of grants of one
// key, as Check counts them) that a forward step of a server's wall clock
// explains (see ClockSteps.explains), and returns the cuts that judge the
// mutex model with what the steps explain excused (see clockCuts).
func nemesisClockOverlaps(ops []Op, steps ClockSteps) (int, stepCuts) {
	return clockCuts(nemesisGrants(ops), steps)
}

// clockCuts returns, for every pair of grants of one key whose newer one
// was granted while the older was proven live and a step explains it
// (ClockSteps.first), the older grant with its earliest such step; and
// the number of those pairs that are proven overlaps (the newer grant
// proven live after its grant too, as Check counts them). A newer grant
// never proven live still places its acquire while the older was proven
// live, which the mutex model finds illegal, so it needs its cut as much.
func clockCuts(gs []*nemesisGrant, steps ClockSteps) (int, stepCuts) {
	if len(steps.At) == 0 {
		return 0, nil
	}
	n, cuts := 0, stepCuts{}
	for i, g := range gs {
		for _, h := range gs[i+1:] {
			if g.key != h.key || (g.shared && h.shared) {
				continue
			}
			older, newer := g, h
			if h.acqRet < g.acqRet {
				older, newer = h, g
			}
			if newer.acqRet >= older.live {
				continue
			}
			if at, ok := steps.first(older.acqCall, older.live, newer.acqRet); ok {
				cuts.add(older.id, at)
				if newer.acqRet < newer.live {
					n++
				}
			}
		}
	}
	return n, cuts
}

// judgeClock sets ClockOverlaps and MutexJudged from the checked
// history ops: the mutex model judged again, if it found the history
// illegal and steps explain some overlaps, with the older grant of each
// explained overlap proven live only up to its step (cutAtSteps). The
// keys with prefix omit are left out, as Check leaves them out of the
// lock models (Run.lockModelsOmit).
func (nr *NemesisResult) judgeClock(ops []Op, steps ClockSteps, omit string) {
	var cuts stepCuts
	nr.ClockOverlaps, cuts = nemesisClockOverlaps(ops, steps)
	nr.MutexJudged = nr.Verdicts["mutex"]
	if nr.MutexJudged == porcupine.Illegal && len(cuts) > 0 {
		nr.MutexJudged = mutexModel(cutAtSteps(ops, cuts), func(op Op) bool { return omit == "" || !strings.HasPrefix(op.Key, omit) })
	}
}

// DetectionTimes returns the times from a fault to the holder's report of
// the loss, and from a fault to the next grant to another worker, of the
// run's cut-off grants (those that happened).
func (nr *NemesisResult) DetectionTimes() (loss, grant []time.Duration) {
	for _, c := range nr.Cutoffs {
		if c.Loss >= 0 {
			loss = append(loss, c.Loss)
		}
		if c.Grant >= 0 {
			grant = append(grant, c.Grant)
		}
	}
	return loss, grant
}

// p50Max renders the median and the maximum of ds and their number, "-"
// if there are none.
func p50Max(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%v / %v (%d)", Percentile(ds, 50).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond), len(ds))
}
