package torture

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	pt "github.com/distlock/distlock/partition"
)

// The recipes of the nemesis mode: besides the lock workers and the
// election candidates, permit workers take permits of one semaphore of
// nemesisPermitLimit permits with slots (more workers than permits), and
// members of one partition group own its units, each with a fence: a
// permit's writes go to its slot's resource with its token, as the permit
// rows write (a permit of a slot is a grant of the slot, so the mutex,
// token and register models apply per slot), and a member writes each
// unit it owns as the partition rows do (a fence per unit). Each recipe's
// invariant is judged on the history: at most nemesisPermitLimit permits
// proven live at one instant, and never two owners of a unit proven live
// at one instant.

// The recipes' workers.
const (
	nemesisPermitWorkers = 3
	nemesisPermitLimit   = 2
	nemesisMembers       = 3
	nemesisUnits         = 6
)

// Key and resource suffixes of the recipes' workloads.
const (
	nemesisPermitSuffix    = "-permits"
	nemesisPartitionSuffix = "-partition"
)

// SlotKey is the key under which a permit of slot of the semaphore named
// key is recorded in a History.
func SlotKey(key string, slot int) string { return fmt.Sprintf("%s/slot/%d", key, slot) }

// nemesisRecipes reports which recipes run on a target: permits where
// the backend grants them with slots (not Redlock, whose quorum of
// independent nodes could grant more than the limit, nor the gateway,
// whose session holds one permit of a semaphore: the permit rows'
// exemptions; nor ZooKeeper, whose semaphore layout names no slots, so
// that no fence per permit can be kept: its permit rows run a limit of
// 1), partitioning everywhere (its units are locks, listed with
// driver.Lister).
func nemesisRecipes(kind string) (permits, units bool) {
	return kind != backendRedlock && kind != backendGateway && kind != backendZK, true
}

// nemesisRecipeWorkers is the number of recipe workers on a target.
func nemesisRecipeWorkers(kind string) int {
	permits, units := nemesisRecipes(kind)
	n := 0
	if permits {
		n += nemesisPermitWorkers
	}
	if units {
		n += nemesisMembers
	}
	return n
}

// RecipeVerdict is what the history says of one recipe's invariant.
type RecipeVerdict struct {
	// Ran reports that the recipe's workload ran on the target.
	Ran bool
	// Limit is the most holders allowed at once: the semaphore's limit,
	// 1 for a unit.
	Limit  int
	Grants int
	// MaxHolders is the most grants proven live at one instant: of the
	// semaphore (permits), or of one unit (partitioning).
	MaxHolders int
	// Over counts the proven excesses: instants at which a grant proven
	// live made more than Limit proven live (permits), and pairs of
	// grants of one slot (permits) or of one unit (partitioning) proven
	// live at a common instant.
	Over int
	// ClockOver counts the excesses (not in Over) that a forward step of
	// a server's wall clock explains (ClockSteps.explains): the server
	// expired the older grant's lease at the step, so these are reported,
	// not judged.
	ClockOver int
	// Pairs and ClockPairs are the pairs of grants of one key (a permit's
	// slot, a unit) among Over and ClockOver: for units every excess is
	// one; for permits the rest are grants over the semaphore's limit.
	Pairs, ClockPairs int
	// TokenRegressions counts the grants of one key (a unit) whose token
	// is not above that of the key's grant proven live before it (see
	// CheckUnits): the units' grants are outside the run's token model.
	TokenRegressions int
	// Mutex is the mutex model's verdict per slot or per unit.
	Mutex porcupine.CheckResult
	// MutexJudged is the mutex model's verdict with the older grant of
	// each pair a clock step explains proven live only up to the step
	// (cutAtSteps); Mutex where no step explains a pair. It is the one
	// judged.
	MutexJudged porcupine.CheckResult
	// Stale writes to the recipe's resources: attempted, refused by the
	// fence, accepted.
	StaleAttempted, StaleRefused, StaleAccepted int
	// Writes to the recipe's resources.
	Writes int
	Notes  []string
}

// Violated reports whether the invariant is proven broken: an excess
// that no clock step explains, a token regression, or the mutex model
// illegal once the steps' explanations are taken out (MutexJudged: the
// model also finds a grant made while another was proven live, when the
// newer one was never proven live itself, which no pair counts).
func (v RecipeVerdict) Violated() bool {
	return v.Ran && (v.Over > 0 || v.TokenRegressions > 0 || v.MutexJudged == porcupine.Illegal)
}

// judgeMutex sets Mutex and MutexJudged from the ops of keys with
// prefix, steps being the forward steps of the servers' clocks.
func (v *RecipeVerdict) judgeMutex(ops []Op, prefix string, steps ClockSteps) {
	v.Mutex = mutexVerdict(ops, prefix)
	v.MutexJudged = v.Mutex
	if v.Mutex != porcupine.Illegal {
		return
	}
	var sel []Op
	for _, op := range ops {
		if strings.HasPrefix(op.Key, prefix) {
			sel = append(sel, op)
		}
	}
	if _, cuts := clockCuts(nemesisGrants(sel), steps); len(cuts) > 0 {
		v.MutexJudged = mutexVerdict(cutAtSteps(ops, cuts), prefix)
	}
}

// interval is a grant's proven life: granted by From (its acquire's
// return), live at To (its end's call: the latest instant it was proven
// live).
type interval struct {
	grant    int
	worker   string
	key      string
	token    uint64
	call     int64 // the acquire's call
	from, to int64
}

// provenIntervals returns the grants of keys with prefix in ops, each
// with its proven life (grants with no proven instant of life after their
// grant are left out: they overlap nothing).
func provenIntervals(ops []Op, prefix string) (all int, ivs []interval) {
	byGrant := map[int]*interval{}
	var order []int
	for _, op := range ops {
		if !strings.HasPrefix(op.Key, prefix) || op.Shared {
			continue
		}
		switch op.Kind {
		case KindAcquire:
			if op.Outcome != OutcomeOK {
				continue
			}
			byGrant[op.Grant] = &interval{grant: op.Grant, worker: op.Worker, key: op.Key, token: op.Token, call: op.Call, from: op.Return, to: op.Return}
			order = append(order, op.Grant)
		case KindEnd:
			if g := byGrant[op.Grant]; g != nil {
				g.to = max(g.to, op.Call)
			}
		}
	}
	for _, id := range order {
		if g := byGrant[id]; g.to > g.from {
			ivs = append(ivs, *g)
		}
	}
	return len(order), ivs
}

// maxHolders returns the most intervals of ivs proven live at a common
// instant (an interval is live strictly after its From and strictly
// before its To, as Check judges an overlap), and the intervals of the
// first instant that had that many.
func maxHolders(ivs []interval) (int, []interval) {
	type edge struct {
		at    int64
		start bool
		i     int
	}
	var es []edge
	for i, iv := range ivs {
		es = append(es, edge{iv.from, true, i}, edge{iv.to, false, i})
	}
	// At one instant, ends before starts: intervals that only touch do
	// not overlap.
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].at != es[j].at {
			return es[i].at < es[j].at
		}
		return !es[i].start && es[j].start
	})
	live := map[int]bool{}
	best := 0
	var at []interval
	for _, e := range es {
		if !e.start {
			delete(live, e.i)
			continue
		}
		live[e.i] = true
		if len(live) > best {
			best = len(live)
			at = at[:0]
			for _, i := range slices.Sorted(func(yield func(int) bool) {
				for i := range live {
					if !yield(i) {
						return
					}
				}
			}) {
				at = append(at, ivs[i])
			}
		}
	}
	return best, at
}

// overCount counts the grants of ivs whose start made more than limit
// intervals proven live at once: those no step of steps explains (see
// ClockSteps.explains: a step that could have cost one of the other live
// ones its lease before the start), and those one does.
func overCount(ivs []interval, limit int, steps ClockSteps) (over, clock int) {
	for _, a := range ivs {
		live, explained := 0, false
		for _, b := range ivs {
			if b.from <= a.from && a.from < b.to {
				live++
				if b != a && steps.explains(b.call, b.to, a.from) {
					explained = true
				}
			}
		}
		// a.from itself is no proven instant of a; the instant just after
		// it is, and every b counted is live there too.
		switch {
		case live <= limit:
		case explained:
			clock++
		default:
			over++
		}
	}
	return over, clock
}

// ClockSteps are the instants (the run's clock) at which a server's wall
// clock stepped forward, and the leases' TTL. A step expires at once the
// leases that server holds, those written by its clock before the step;
// a lease written or renewed after it runs by the moved clock and lasts.
type ClockSteps struct {
	At  []int64
	TTL time.Duration
}

// explains reports whether a step of cs can explain that an older grant,
// asked for at olderCall and proven live until olderTo, still counted on
// its lease when a newer one was granted at newerFrom: the step came
// before newerFrom, and after the older grant's last renewal (the holder
// proves its lease live only within a TTL of a renewal it sent, so a
// step before olderTo - TTL came before that renewal, which the moved
// clock then kept; a tenth of a TTL is allowed for the stamps) and its
// call.
func (cs ClockSteps) explains(olderCall, olderTo, newerFrom int64) bool {
	_, ok := cs.first(olderCall, olderTo, newerFrom)
	return ok
}

// first returns the earliest step that explains the pair (see explains):
// the instant from which the older grant's lease may have been gone.
func (cs ClockSteps) first(olderCall, olderTo, newerFrom int64) (int64, bool) {
	lo := max(olderCall, olderTo-int64(cs.TTL+cs.TTL/10))
	at, ok := int64(0), false
	for _, s := range cs.At {
		if s >= lo && s <= newerFrom && (!ok || s < at) {
			at, ok = s, true
		}
	}
	return at, ok
}

// stepCuts records, for the older grant of a pair a step explains, the
// earliest such step: its life as the service saw it may have ended
// there (see cutAtSteps).
type stepCuts map[int]int64

func (c stepCuts) add(grant int, at int64) {
	if old, ok := c[grant]; !ok || at < old {
		c[grant] = at
	}
}

// cutAtSteps returns ops with the end of each grant of cuts proven live
// only up to its step: the mutex model judged on them excuses what the
// steps explain and nothing else (a grant made before the step while the
// older one was proven live is still a violation, as is any pair of other
// grants, of this key or another).
func cutAtSteps(ops []Op, cuts stepCuts) []Op {
	if len(cuts) == 0 {
		return ops
	}
	out := slices.Clone(ops)
	for i, op := range out {
		if at, ok := cuts[op.Grant]; ok && op.Kind == KindEnd && at < op.Call {
			out[i].Call = at
		}
	}
	return out
}

func (iv interval) String() string {
	ms := func(t int64) string { return fmt.Sprintf("%.1f", float64(t)/1e6) }
	return fmt.Sprintf("grant %d (%s, %s, token %d: granted by %s, proven live at %s)", iv.grant, iv.worker, iv.key, iv.token, ms(iv.from), ms(iv.to))
}

// mutexVerdict runs the mutex model over the ops of keys with prefix.
func mutexVerdict(ops []Op, prefix string) porcupine.CheckResult {
	return mutexModel(ops, func(op Op) bool { return strings.HasPrefix(op.Key, prefix) })
}

// mutexModel runs the mutex model over the ops that keep selects.
func mutexModel(ops []Op, keep func(Op) bool) porcupine.CheckResult {
	var sel []Op
	clients := map[string]int{}
	for _, op := range ops {
		if keep(op) && (op.Kind == KindAcquire || op.Kind == KindEnd) {
			sel = append(sel, op)
			if _, ok := clients[op.Worker]; !ok {
				clients[op.Worker] = len(clients)
			}
		}
	}
	pops := operations(sel, []modelKind{modelMutex}, clients)
	if len(pops) == 0 {
		return porcupine.Ok
	}
	return porcupine.CheckOperationsTimeout(model, pops, CheckTimeout)
}

// staleCounts counts the writes to resources with prefix.
func (v *RecipeVerdict) staleCounts(ops []Op, prefix string) {
	for _, op := range ops {
		if op.Kind != KindWrite || !strings.HasPrefix(op.Key, prefix) {
			continue
		}
		v.Writes++
		if op.Stale {
			v.StaleAttempted++
			if op.Outcome == OutcomeStale {
				v.StaleRefused++
			} else {
				v.StaleAccepted++
			}
		}
	}
}

// CheckPermits judges the permits of the semaphore named key in ops: at
// most limit permits proven live at one instant (from their grants'
// returns to the latest instants they were proven live, as Check judges
// an overlap), one holder per slot (the mutex model over the slots'
// keys), and counts the writes to the slots' resources (prefix res).
// Steps are the instants at which a server's wall clock stepped forward
// (Run.Clock readings): an excess one explains is counted apart
// (ClockOver), not judged.
func CheckPermits(ops []Op, key string, limit int, res string, steps ClockSteps) RecipeVerdict {
	v := RecipeVerdict{Ran: true, Limit: limit}
	prefix := key + "/slot/"
	var ivs []interval
	v.Grants, ivs = provenIntervals(ops, prefix)
	var at []interval
	v.MaxHolders, at = maxHolders(ivs)
	v.Over, v.ClockOver = overCount(ivs, limit, steps)
	// Two holders of one slot, within the limit in all: its mutex model
	// finds them; a clock step may explain them as it explains an excess.
	v.pairs(ivs, steps, "slot", "two holders")
	if v.MaxHolders > limit {
		v.Notes = append(v.Notes, fmt.Sprintf("permits: %d proven live at once, over the limit of %d: %s", v.MaxHolders, limit, joinIntervals(at)))
	}
	v.judgeMutex(ops, prefix, steps)
	v.staleCounts(ops, res)
	return v
}

// CheckUnits judges the units of the partition group whose unit keys
// have prefix (Partition.UnitKey's prefix) in ops: never two grants of
// one unit proven live at a common instant, each grant's token above
// those of the unit's grants proven live before it, and the mutex model
// per unit; and counts the writes to the units' resources (prefix res).
// Steps are as for CheckPermits: two owners that a forward step of a
// server's clock explains are counted apart (ClockOver), not judged.
func CheckUnits(ops []Op, prefix string, res string, steps ClockSteps) RecipeVerdict {
	v := RecipeVerdict{Ran: true, Limit: 1}
	var ivs []interval
	v.Grants, ivs = provenIntervals(ops, prefix)
	v.MaxHolders = v.pairs(ivs, steps, "unit", "two owners")
	v.tokenRegressions(ivs, steps)
	v.judgeMutex(ops, prefix, steps)
	v.staleCounts(ops, res)
	return v
}

// tokenRegressions counts, per key of ivs, the grants whose token is not
// above that of a grant of the key proven live entirely before it (its
// last proof of life no later than this one's grant). The argument rests
// on exclusion: had the later grant been made first, its lease would have
// ended before the earlier one was made, yet it was proven live after.
// Pairs proven live at a common instant have no such order; they are
// counted as pairs. A forward step of a server's clock breaks exclusion
// as it does for pairs (ClockSteps.explains): a grant made just before a
// step whose report reached its member late may show a lower token after
// a grant made after the step; such a pair is noted, not judged. A unit's
// grants are judged here because their acquire calls are stamped from
// their member's start (Run.unitGranted), which puts them outside the
// run's token model (Run.lockModelsOmit).
func (v *RecipeVerdict) tokenRegressions(ivs []interval, steps ClockSteps) {
	for _, b := range ivs {
		for _, a := range ivs {
			if a.key != b.key || a.grant == b.grant || a.to > b.from || b.token > a.token {
				continue
			}
			// b's token is lower: if b was granted first, a step after it
			// and before a's grant explains the order.
			if steps.explains(b.call, b.to, a.from) {
				v.Notes = append(v.Notes, fmt.Sprintf("unit %s: token %d not above %d after a server's clock stepped forward (not judged): %s after %s", b.key, b.token, a.token, b, a))
				continue
			}
			v.TokenRegressions++
			v.Notes = append(v.Notes, fmt.Sprintf("unit %s: token %d not above %d: %s after %s", b.key, b.token, a.token, b, a))
			break
		}
	}
}

// pairs counts, per key of ivs (a unit, or a permit's slot), the pairs
// of grants proven live at a common instant: in Over and Pairs, or in
// ClockOver and ClockPairs where a forward step of a server's clock explains the pair (see
// ClockSteps.explains), with a note for each. It returns the most grants
// of one key proven live at once.
func (v *RecipeVerdict) pairs(ivs []interval, steps ClockSteps, what, pair string) int {
	byKey := map[string][]interval{}
	for _, iv := range ivs {
		byKey[iv.key] = append(byKey[iv.key], iv)
	}
	most := 0
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		ks := byKey[key]
		n, _ := maxHolders(ks)
		most = max(most, n)
		for i, a := range ks {
			for _, b := range ks[i+1:] {
				if max(a.from, b.from) >= min(a.to, b.to) {
					continue
				}
				older, newer := a, b
				if b.from < a.from {
					older, newer = b, a
				}
				if steps.explains(older.call, older.to, newer.from) {
					v.ClockOver++
					v.ClockPairs++
					v.Notes = append(v.Notes, fmt.Sprintf("%s %s: %s after a server's clock stepped forward (not judged): %s and %s", what, key, pair, a, b))
					continue
				}
				v.Over++
				v.Pairs++
				v.Notes = append(v.Notes, fmt.Sprintf("%s %s: %s: %s and %s", what, key, pair, a, b))
			}
		}
	}
	return most
}

func joinIntervals(ivs []interval) string {
	s := make([]string, len(ivs))
	for i, iv := range ivs {
		s[i] = iv.String()
	}
	return strings.Join(s, "; ")
}

// nemesisJoin makes w a member of group with nemesisUnits units, writing
// each unit it owns at res+"-u"+UNIT (Worker.Member with the nemesis's
// unit count).
func nemesisJoin(w *Worker, group, res string) error {
	w.run.mu.Lock()
	w.memberAt = w.run.Clock.Now()
	w.run.mu.Unlock()
	_, err := w.must(request{Cmd: cmdMember, Key: group, Resource: res, Units: nemesisUnits,
		Reconcile: memberReconcile, MinHold: memberMinHold, Timeout: time.Minute})
	return err
}

// nemesisMemberWork is a member's workload until stop: it has joined the
// group; its unit writers check their units before each write, except in
// stubborn spells (a member that ignores its units' contexts, which only
// the fence per unit can refuse), drawn at random, one to three TTLs long
// (a unit lost in a spell has its writer write on, after the next owner,
// until the spell ends), a quarter of a TTL to a TTL apart (when a
// writer whose unit ended returns, and the unit moves on). It returns an
// error only if the harness failed (a worker gone).
func nemesisMemberWork(nw *nemesisWorker, rng *rand.Rand, stop <-chan struct{}, ttl time.Duration) error {
	span := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	wait := func(d time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(d):
			return true
		}
	}
	for {
		if !wait(span(ttl/4, ttl)) {
			return nil
		}
		if err := nw.w.Stubborn(true); err != nil {
			return err
		}
		ok := wait(span(ttl, 3*ttl))
		if err := nw.w.Stubborn(false); err != nil {
			return err
		}
		if !ok {
			return nil
		}
	}
}

// checkRecipes judges the recipes of a nemesis run on its history; steps
// are the instants at which a server's wall clock stepped forward. r is
// nil for a saved history.
func (nr *NemesisResult) checkRecipes(r *Run, permitKey, permitRes, group, unitRes string, permits, units bool, steps ClockSteps) {
	if permits {
		nr.Permits = CheckPermits(nr.Ops, permitKey, nemesisPermitLimit, permitRes, steps)
		nr.Notes = append(nr.Notes, nr.Permits.Notes...)
	}
	if units {
		nr.Units = CheckUnits(nr.Ops, pt.KeyPrefix+group+"/units/", unitRes, steps)
		nr.Notes = append(nr.Notes, nr.Units.Notes...)
		if r == nil {
			return // a saved history (JudgeHistory): the members are gone
		}
		r.mu.Lock()
		for _, w := range r.workers {
			if w.memberErr != "" {
				nr.MemberErrors++
				nr.Notes = append(nr.Notes, fmt.Sprintf("member %s: partition.Run returned: %s", w.Name, w.memberErr))
			}
		}
		r.mu.Unlock()
	}
}

// recipeCell renders a recipe's verdict for the table: pair names a
// pair of grants of one key ("pairs of owners" of a unit, "pairs of
// holders" of a permit's slot); the rest of the excesses are grants over
// the limit.
func recipeCell(v RecipeVerdict, pair string) string {
	if !v.Ran {
		return "-"
	}
	s := fmt.Sprintf("%s, at most %d of %d", judgedName(v.Mutex, v.MutexJudged), v.MaxHolders, v.Limit)
	count := func(n int, what string) {
		if n > 0 {
			s += fmt.Sprintf(", %d %s", n, what)
		}
	}
	count(v.Over-v.Pairs, "grants over the limit")
	count(v.Pairs, pair)
	count(v.TokenRegressions, "token regressions")
	count(v.ClockOver-v.ClockPairs, "grants over the limit after a server's clock stepped forward (not judged)")
	count(v.ClockPairs, pair+" after a server's clock stepped forward (not judged)")
	return s
}

// staleCell renders a recipe's stale writes for the table.
func staleCell(v RecipeVerdict) string {
	if !v.Ran {
		return "-"
	}
	return fmt.Sprintf("%d/%d/%d", v.StaleAttempted, v.StaleRefused, v.StaleAccepted)
}
