package torture

import (
	"slices"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	pt "github.com/distlock/distlock/partition"
)

// hist builds a history of grants: each (worker, key, token, granted, live
// until) becomes an acquire returning at granted and an end whose call is
// the latest instant the grant was proven live, as Run.Check records them.
type grantSpec struct {
	worker     string
	key        string
	token      uint64
	from, live int64
}

func grantHistory(gs []grantSpec) []Op {
	var ops []Op
	for i, g := range gs {
		ops = append(ops, Op{Worker: g.worker, Kind: KindAcquire, Key: g.key, Grant: i + 1, Token: g.token, Call: g.from - 1, Return: g.from, Outcome: OutcomeOK})
	}
	for i, g := range gs {
		ops = append(ops, Op{Worker: g.worker, Kind: KindEnd, Key: g.key, Grant: i + 1, Token: g.token, Call: g.live, Return: g.live + 1, Outcome: OutcomeOK})
	}
	return ops
}

// CheckPermits finds N+1 permits proven live at once, even in slots of
// their own (each slot's history legal), and passes N at once, and
// grants that only touch.
func TestCheckPermitsLimit(t *testing.T) {
	key := "sem"
	s := func(slot int) string { return SlotKey(key, slot) }
	// Two permits at once, then a third after one ended: the limit of 2 holds.
	ok := grantHistory([]grantSpec{
		{"A", s(0), 1, 10, 100},
		{"B", s(1), 2, 20, 200},
		{"C", s(0), 3, 100, 300}, // granted as A's proof of life ends: no overlap
	})
	v := CheckPermits(ok, key, 2, "res", ClockSteps{})
	if v.Violated() || v.MaxHolders != 2 || v.Over != 0 || v.Grants != 3 || v.Mutex != porcupine.Ok {
		t.Fatalf("a legal history judged %+v", v)
	}
	// Three permits proven live at one instant, in three slots: over the
	// limit though each slot has one holder.
	over := grantHistory([]grantSpec{
		{"A", s(0), 1, 10, 100},
		{"B", s(1), 2, 20, 200},
		{"C", s(2), 3, 50, 300},
	})
	v = CheckPermits(over, key, 2, "res", ClockSteps{})
	if !v.Violated() || v.MaxHolders != 3 || v.Over != 1 {
		t.Fatalf("3 permits live at once under a limit of 2 judged %+v", v)
	}
	if len(v.Notes) != 1 || !strings.Contains(v.Notes[0], "3 proven live at once") {
		t.Errorf("notes %q", v.Notes)
	}
	// A forward step of a server's clock between the first call and the
	// third grant explains the excess: counted apart, not judged.
	v = CheckPermits(over, key, 2, "res", ClockSteps{At: []int64{30}, TTL: 1000})
	if v.Violated() || v.Over != 0 || v.ClockOver != 1 || v.MaxHolders != 3 {
		t.Fatalf("3 permits after a clock step judged %+v", v)
	}
	// A step more than a TTL before the others' last proofs of life
	// (100 and 200) explains nothing: they renewed after it.
	if v = CheckPermits(over, key, 2, "res", ClockSteps{At: []int64{30}, TTL: 50}); !v.Violated() || v.Over != 1 || v.ClockOver != 0 {
		t.Fatalf("3 permits, a clock step before the others' renewals, judged %+v", v)
	}
	// A step after the third grant explains nothing.
	if v = CheckPermits(over, key, 2, "res", ClockSteps{At: []int64{60}, TTL: 1000}); !v.Violated() || v.Over != 1 || v.ClockOver != 0 {
		t.Fatalf("3 permits, a clock step after them, judged %+v", v)
	}
	// Two holders of one slot at once: the slot's mutex model is illegal.
	slot := grantHistory([]grantSpec{
		{"A", s(0), 1, 10, 100},
		{"B", s(0), 2, 20, 200},
	})
	v = CheckPermits(slot, key, 2, "res", ClockSteps{})
	if !v.Violated() || v.Mutex != porcupine.Illegal || v.Over != 1 {
		t.Fatalf("two holders of one slot judged %+v", v)
	}
	// A forward step of a server's clock after A's call, within a TTL of
	// its last proof of life and before B's grant, explains them, as it
	// explains an excess: reported, not judged (the slot's mutex model
	// stays illegal).
	if v = CheckPermits(slot, key, 2, "res", ClockSteps{At: []int64{15}, TTL: 1000}); v.Violated() || v.ClockOver != 1 || v.Over != 0 {
		t.Fatalf("two holders of one slot after a clock step judged %+v", v)
	}
	// Other keys are not the semaphore's.
	other := grantHistory([]grantSpec{
		{"A", "lock", 1, 10, 100},
		{"B", "lock", 2, 20, 200},
		{"C", s(0), 3, 50, 300},
	})
	if v = CheckPermits(other, key, 1, "res", ClockSteps{}); v.Violated() || v.Grants != 1 {
		t.Fatalf("another key's grants counted: %+v", v)
	}
}

// CheckUnits finds two owners of a unit proven live at once, and passes
// a unit handed from one member to the next.
func TestCheckUnitsOneOwner(t *testing.T) {
	prefix := pt.KeyPrefix + "g/units/"
	u := func(n string) string { return prefix + n }
	ok := grantHistory([]grantSpec{
		{"M0", u("0"), 1, 10, 100},
		{"M1", u("0"), 2, 100, 200}, // after M0's last proof of life
		{"M1", u("1"), 1, 10, 300},
		{"M2", u("2"), 1, 10, 300},
	})
	v := CheckUnits(ok, prefix, "res", ClockSteps{})
	if v.Violated() || v.MaxHolders != 1 || v.Grants != 4 || v.Mutex != porcupine.Ok {
		t.Fatalf("a legal history judged %+v", v)
	}
	two := grantHistory([]grantSpec{
		{"M0", u("0"), 1, 10, 100},
		{"M1", u("0"), 2, 50, 200},
		{"M1", u("1"), 1, 10, 300},
	})
	v = CheckUnits(two, prefix, "res", ClockSteps{})
	if !v.Violated() || v.Over != 1 || v.MaxHolders != 2 || v.Mutex != porcupine.Illegal {
		t.Fatalf("two owners of unit 0 judged %+v", v)
	}
	if len(v.Notes) != 1 || !strings.Contains(v.Notes[0], "two owners") {
		t.Errorf("notes %q", v.Notes)
	}
	// A forward step of a server's clock between the older grant's call
	// and the newer grant explains the two owners: reported, not judged.
	v = CheckUnits(two, prefix, "res", ClockSteps{At: []int64{40}, TTL: 1000})
	if v.Violated() || v.Over != 0 || v.ClockOver != 1 || v.Mutex != porcupine.Illegal {
		t.Fatalf("two owners after a clock step judged %+v", v)
	}
	if v = CheckUnits(two, prefix, "res", ClockSteps{At: []int64{51}, TTL: 1000}); !v.Violated() || v.Over != 1 {
		t.Fatalf("two owners, a clock step after them, judged %+v", v)
	}
	// A step more than a TTL before the older owner's last proof of life
	// came before a renewal that the moved clock kept: it explains
	// nothing, however early the older grant was asked for (a member's
	// units are stamped from its start).
	member := []Op{
		{Worker: "M0", Kind: KindAcquire, Key: u("0"), Grant: 1, Token: 1, Call: 0, Return: 10, Outcome: OutcomeOK},
		{Worker: "M1", Kind: KindAcquire, Key: u("0"), Grant: 2, Token: 2, Call: 0, Return: 50, Outcome: OutcomeOK},
		{Worker: "M0", Kind: KindEnd, Key: u("0"), Grant: 1, Token: 1, Call: 100, Return: 101, Outcome: OutcomeOK},
		{Worker: "M1", Kind: KindEnd, Key: u("0"), Grant: 2, Token: 2, Call: 200, Return: 201, Outcome: OutcomeOK},
	}
	if v = CheckUnits(member, prefix, "res", ClockSteps{At: []int64{5}, TTL: 20}); !v.Violated() || v.Over != 1 || v.ClockOver != 0 {
		t.Fatalf("two owners, a clock step long before the older one's last renewal, judged %+v", v)
	}
	if v = CheckUnits(member, prefix, "res", ClockSteps{At: []int64{5}, TTL: 100}); v.Violated() || v.ClockOver != 1 {
		t.Fatalf("two owners, a clock step within a TTL of the older one's last proof of life, judged %+v", v)
	}
}

// The recipes' stale writes are counted per recipe, by resource prefix.
func TestRecipeStaleCounts(t *testing.T) {
	ops := []Op{
		{Kind: KindWrite, Key: "r-permits-s0", Outcome: OutcomeOK},
		{Kind: KindWrite, Key: "r-permits-s1", Stale: true, Outcome: OutcomeStale},
		{Kind: KindWrite, Key: "r-permits-s0", Stale: true, Outcome: OutcomeOK},
		{Kind: KindWrite, Key: "r-partition-u1", Stale: true, Outcome: OutcomeOK},
		{Kind: KindWrite, Key: "r", Stale: true, Outcome: OutcomeOK},
	}
	v := CheckPermits(ops, "sem", 2, "r-permits", ClockSteps{})
	if v.Writes != 3 || v.StaleAttempted != 2 || v.StaleRefused != 1 || v.StaleAccepted != 1 {
		t.Fatalf("permit writes counted %+v", v)
	}
	v = CheckUnits(ops, "units/", "r-partition", ClockSteps{})
	if v.Writes != 1 || v.StaleAttempted != 1 || v.StaleAccepted != 1 {
		t.Fatalf("unit writes counted %+v", v)
	}
}

// A judged result with a recipe violated fails Judge, and the table
// names it.
func TestNemesisJudgesRecipes(t *testing.T) {
	base := func() *NemesisResult {
		return &NemesisResult{Result: &Result{Mode: Fenced, Verdicts: map[string]porcupine.CheckResult{}}, Faults: map[string]int{}}
	}
	nr := base()
	nr.Permits = RecipeVerdict{Ran: true, Limit: 2, Grants: 5, MaxHolders: 2, Mutex: porcupine.Ok}
	nr.Units = RecipeVerdict{Ran: true, Limit: 1, Grants: 9, MaxHolders: 1, Mutex: porcupine.Ok}
	if bad := nr.Judge(); len(bad) != 0 {
		t.Fatalf("judged %q", bad)
	}
	nr.Permits.MaxHolders, nr.Permits.Over = 3, 1
	if bad := nr.Judge(); len(bad) != 1 || !strings.HasPrefix(bad[0], "permits:") {
		t.Fatalf("3 permits of 2 judged %q", bad)
	}
	nr = base()
	nr.Units = RecipeVerdict{Ran: true, Limit: 1, Grants: 9, MaxHolders: 2, Over: 1, Pairs: 1, Mutex: porcupine.Illegal, MutexJudged: porcupine.Illegal}
	if bad := nr.Judge(); len(bad) != 1 || !strings.HasPrefix(bad[0], "partitioning:") {
		t.Fatalf("two owners judged %q", bad)
	}
	table := NemesisTable([]*NemesisResult{nr})
	if !strings.Contains(table, "| permit grants | permits (≤N) |") || !strings.Contains(table, "ILLEGAL, at most 2 of 1, 1 pairs of owners") ||
		!strings.Contains(table, "VIOLATION: partitioning") {
		t.Fatalf("table:\n%s", table)
	}
	// A row's cells line up with the header's.
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if n, m := strings.Count(lines[0], "|"), strings.Count(lines[2], "|"); n != m {
		t.Fatalf("header has %d cells' bars, row %d:\n%s", n, m, table)
	}
}

// A clock step excuses the overlaps it explains and nothing else: the
// mutex model is judged again with the older grant of each explained
// overlap proven live only up to the step. A grant whose holder was never
// proven live after it (no pair counts it) made while another grant was
// proven live is still a violation, on another key or on the same key
// before the step; after the step it is excused.
func TestNemesisClockExcusesOnlyItsOverlaps(t *testing.T) {
	// k: X (granted 10, proven live to 100), Z granted at 50 after the
	// step at 40 (an explained overlap).
	pair := []Op{
		{Worker: "A", Kind: KindAcquire, Key: "k", Grant: 1, Token: 1, Call: 0, Return: 10, Outcome: OutcomeOK},
		{Worker: "B", Kind: KindAcquire, Key: "k", Grant: 2, Token: 2, Call: 45, Return: 50, Outcome: OutcomeOK},
		{Worker: "A", Kind: KindEnd, Key: "k", Grant: 1, Token: 1, Call: 100, Return: 101, Outcome: OutcomeOK},
		{Worker: "B", Kind: KindEnd, Key: "k", Grant: 2, Token: 2, Call: 200, Return: 201, Outcome: OutcomeOK},
	}
	// unproven returns a grant (id) of key granted in [call, ret] whose end
	// was called at end, before its grant returned: no proven instant of
	// life, so no pair counts it; the mutex model still places it.
	unproven := func(id int, key string, call, ret, end int64) []Op {
		return []Op{
			{Worker: "C", Kind: KindAcquire, Key: key, Grant: id, Token: uint64(id), Call: call, Return: ret, Outcome: OutcomeOK},
			{Worker: "C", Kind: KindEnd, Key: key, Grant: id, Token: uint64(id), Call: end, Return: ret + 1, Outcome: OutcomeOK},
		}
	}
	other := []Op{
		{Worker: "D", Kind: KindAcquire, Key: "j", Grant: 10, Token: 1, Call: 0, Return: 5, Outcome: OutcomeOK},
		{Worker: "D", Kind: KindEnd, Key: "j", Grant: 10, Token: 1, Call: 300, Return: 301, Outcome: OutcomeOK},
	}
	steps := ClockSteps{At: []int64{40}, TTL: 1000}
	judge := func(ops []Op) []string {
		nr := &NemesisResult{Result: &Result{Mode: Fenced, Overlaps: 1, Ops: ops,
			Verdicts: map[string]porcupine.CheckResult{"mutex": mutexModel(ops, func(Op) bool { return true })}}}
		nr.judgeClock(ops, steps, "")
		if nr.ClockOverlaps != 1 {
			t.Fatalf("%d overlaps explained, want 1", nr.ClockOverlaps)
		}
		return nr.Judge()
	}
	if bad := judge(pair); len(bad) != 0 {
		t.Fatalf("the explained overlap alone judged %q", bad)
	}
	cases := []struct {
		name string
		ops  []Op
		bad  bool
	}{
		{"another key, granted while its holder was proven live", slices.Concat(pair, other, unproven(11, "j", 20, 30, 25)), true},
		{"the same key, before the step", slices.Concat(pair, unproven(11, "k", 15, 20, 18)), true},
		{"the same key, after the step, before the newer grant", slices.Concat(pair, unproven(11, "k", 41, 43, 42)), false},
	}
	for _, c := range cases {
		if bad := judge(c.ops); (len(bad) > 0) != c.bad {
			t.Errorf("%s: judged %q", c.name, bad)
		}
	}
	// The same for a unit: the explained pair, and a grant made before
	// the step while the older owner was proven live.
	prefix := pt.KeyPrefix + "g/units/"
	unit := func(ops []Op) []Op {
		out := slices.Clone(ops)
		for i := range out {
			out[i].Key = prefix + out[i].Key
		}
		return out
	}
	if v := CheckUnits(unit(pair), prefix, "res", steps); v.Violated() || v.ClockPairs != 1 || v.Mutex != porcupine.Illegal || v.MutexJudged != porcupine.Ok {
		t.Fatalf("an explained pair of owners judged %+v", v)
	}
	if v := CheckUnits(unit(slices.Concat(pair, unproven(11, "k", 15, 20, 18))), prefix, "res", steps); !v.Violated() || v.MutexJudged != porcupine.Illegal {
		t.Fatalf("an owner granted before the step while the older one was proven live judged %+v", v)
	}
}

// CheckUnits finds a unit's token that is not above the token of the
// unit's grant proven live before it.
func TestCheckUnitsTokens(t *testing.T) {
	prefix := pt.KeyPrefix + "g/units/"
	u := func(n string) string { return prefix + n }
	for _, c := range []struct {
		name      string
		gs        []grantSpec
		regressed int
	}{
		{"rising", []grantSpec{{"M0", u("0"), 5, 10, 100}, {"M1", u("0"), 6, 100, 200}, {"M1", u("1"), 1, 10, 300}}, 0},
		{"lower after", []grantSpec{{"M0", u("0"), 5, 10, 100}, {"M1", u("0"), 4, 150, 200}}, 1},
		{"the same token again", []grantSpec{{"M0", u("0"), 5, 10, 100}, {"M1", u("0"), 5, 150, 200}}, 1},
		// Each unit's tokens are its own.
		{"lower on another unit", []grantSpec{{"M0", u("0"), 5, 10, 100}, {"M1", u("1"), 1, 150, 200}}, 0},
		// Two owners at once: a pair, not a regression.
		{"overlapping", []grantSpec{{"M0", u("0"), 5, 10, 100}, {"M1", u("0"), 4, 50, 200}}, 0},
	} {
		v := CheckUnits(grantHistory(c.gs), prefix, "res", ClockSteps{})
		if v.TokenRegressions != c.regressed || (v.Violated() != (c.regressed > 0 || v.Over > 0)) {
			t.Errorf("%s: %+v", c.name, v)
		}
	}
}

// The table tells a permit slot's pair of holders from grants over the
// limit, counts the units' token regressions, and names the members
// whose partition.Run returned.
func TestNemesisTableRecipeCells(t *testing.T) {
	key := "sem"
	slot := grantHistory([]grantSpec{{"A", SlotKey(key, 0), 1, 10, 100}, {"B", SlotKey(key, 0), 2, 20, 200}})
	nr := &NemesisResult{Result: &Result{Mode: Fenced, Verdicts: map[string]porcupine.CheckResult{}}, Faults: map[string]int{}}
	nr.Permits = CheckPermits(slot, key, 2, "res", ClockSteps{At: []int64{15}, TTL: 1000})
	nr.Units = CheckUnits(grantHistory([]grantSpec{{"M0", pt.KeyPrefix + "g/units/0", 5, 10, 100}, {"M1", pt.KeyPrefix + "g/units/0", 4, 150, 200}}),
		pt.KeyPrefix+"g/units/", "res", ClockSteps{})
	nr.MemberErrors = 1
	table := NemesisTable([]*NemesisResult{nr})
	for _, want := range []string{
		"ILLEGAL (ok once the clock steps are excused), at most 2 of 2, 1 pairs of holders of one slot after a server's clock stepped forward (not judged) |",
		"| 2 (1 members' partition.Run returned) |",
		"ok, at most 1 of 1, 1 token regressions |",
		"VIOLATION: partitioning: one owner per unit: 0 pairs of owners proven live at once, 1 token regressions",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "over the limit") {
		t.Errorf("a slot's pair called grants over the limit:\n%s", table)
	}
}

// A newer grant never proven live after its grant, made after a step
// while the older grant was proven live, is explained by the step as a
// proven one is: the mutex model places its acquire while the older
// grant was proven live, and the older grant's cut excuses it.
func TestNemesisClockExcusesUnprovenNewer(t *testing.T) {
	steps := ClockSteps{At: []int64{40}, TTL: 1000}
	// j: an explained, proven pair.
	pairJ := []Op{
		{Worker: "A", Kind: KindAcquire, Key: "j", Grant: 1, Token: 1, Call: 0, Return: 10, Outcome: OutcomeOK},
		{Worker: "B", Kind: KindAcquire, Key: "j", Grant: 2, Token: 2, Call: 45, Return: 50, Outcome: OutcomeOK},
		{Worker: "A", Kind: KindEnd, Key: "j", Grant: 1, Token: 1, Call: 100, Return: 101, Outcome: OutcomeOK},
		{Worker: "B", Kind: KindEnd, Key: "j", Grant: 2, Token: 2, Call: 200, Return: 201, Outcome: OutcomeOK},
	}
	// k: O granted at 10, proven live to 100; N granted in [45, 50],
	// after the step, proven live until nLive.
	k := func(nLive int64) []Op {
		return []Op{
			{Worker: "C", Kind: KindAcquire, Key: "k", Grant: 3, Token: 1, Call: 0, Return: 10, Outcome: OutcomeOK},
			{Worker: "D", Kind: KindAcquire, Key: "k", Grant: 4, Token: 2, Call: 45, Return: 50, Outcome: OutcomeOK},
			{Worker: "C", Kind: KindEnd, Key: "k", Grant: 3, Token: 1, Call: 100, Return: 101, Outcome: OutcomeOK},
			{Worker: "D", Kind: KindEnd, Key: "k", Grant: 4, Token: 2, Call: nLive, Return: 300, Outcome: OutcomeOK},
		}
	}
	judge := func(ops []Op, overlaps int) (*NemesisResult, []string) {
		nr := &NemesisResult{Result: &Result{Mode: Fenced, Overlaps: overlaps, Ops: ops,
			Verdicts: map[string]porcupine.CheckResult{"mutex": mutexModel(ops, func(Op) bool { return true })}}}
		nr.judgeClock(ops, steps, "")
		return nr, nr.Judge()
	}
	if nr, bad := judge(slices.Concat(pairJ, k(120)), 2); len(bad) != 0 || nr.ClockOverlaps != 2 {
		t.Errorf("N proven live: %d overlaps explained, judged %q", nr.ClockOverlaps, bad)
	}
	if nr, bad := judge(slices.Concat(pairJ, k(45)), 1); len(bad) != 0 || nr.ClockOverlaps != 1 {
		t.Errorf("N never proven live: %d overlaps explained, mutex judged %s, judged %q", nr.ClockOverlaps, nr.MutexJudged, bad)
	}
	slot := slices.Clone(k(45))
	for i := range slot {
		slot[i].Key = SlotKey("sem", 0)
	}
	if v := CheckPermits(slot, "sem", 2, "res", steps); v.Violated() || v.Mutex != porcupine.Illegal || v.MutexJudged != porcupine.Ok {
		t.Errorf("a slot's holder granted after the step, never proven live, judged %+v", v)
	}
	if v := CheckPermits(slot, "sem", 2, "res", ClockSteps{}); !v.Violated() {
		t.Errorf("without the step, judged %+v", v)
	}
}

// A unit's lower token reported after a higher one is not judged when a
// step explains it: granted just before a forward step that expired its
// lease, its report delayed past the next owner's grant made after the
// step.
func TestCheckUnitsTokensAfterStep(t *testing.T) {
	prefix := pt.KeyPrefix + "g/units/"
	u := prefix + "0"
	ops := []Op{
		{Worker: "M0", Kind: KindAcquire, Key: u, Grant: 1, Token: 5, Call: 0, Return: 100, Outcome: OutcomeOK},
		{Worker: "M1", Kind: KindAcquire, Key: u, Grant: 2, Token: 4, Call: 0, Return: 160, Outcome: OutcomeOK},
		{Worker: "M0", Kind: KindEnd, Key: u, Grant: 1, Token: 5, Call: 150, Return: 151, Outcome: OutcomeOK},
		{Worker: "M1", Kind: KindEnd, Key: u, Grant: 2, Token: 4, Call: 180, Return: 181, Outcome: OutcomeOK},
	}
	if v := CheckUnits(ops, prefix, "res", ClockSteps{At: []int64{90}, TTL: 1000}); v.Violated() || v.TokenRegressions != 0 {
		t.Errorf("after a step, judged %+v", v)
	}
	if v := CheckUnits(ops, prefix, "res", ClockSteps{}); !v.Violated() || v.TokenRegressions != 1 {
		t.Errorf("without a step, judged %+v", v)
	}
}

// A saved history is judged again as the run judged it: an overlap no
// step explains is a violation, and one a step explains is not.
func TestJudgeHistoryRoundTrip(t *testing.T) {
	ops := grantHistory([]grantSpec{{"A", "k", 1, 10, 100}, {"B", "k", 2, 50, 200}})
	for _, c := range []struct {
		steps ClockSteps
		bad   bool
	}{{ClockSteps{TTL: 1000}, true}, {ClockSteps{At: []int64{40}, TTL: 1000}, false}} {
		nr := &NemesisResult{Result: &Result{}, history: &NemesisHistory{Backend: "redis", Mode: "fenced", Seed: 7, Steps: c.steps, Ops: ops}}
		path := t.TempDir() + "/h.json"
		if err := nr.WriteHistory(path); err != nil {
			t.Fatal(err)
		}
		got, err := JudgeHistory(path)
		if err != nil {
			t.Fatal(err)
		}
		if bad := got.Judge(); (len(bad) > 0) != c.bad || got.Overlaps != 1 || got.Seed != 7 || got.Mode != Fenced {
			t.Errorf("steps %v: judged %q, %d overlaps, %+v", c.steps.At, bad, got.Overlaps, got.Result)
		}
	}
	// A token below that of a grant returned before its call: a
	// regression, counted as Check counts it.
	ops = grantHistory([]grantSpec{{"A", "k", 5, 10, 20}, {"B", "k", 3, 50, 60}})
	nr := &NemesisResult{Result: &Result{}, history: &NemesisHistory{Backend: "redis", Mode: "fenced", Ops: ops}}
	path := t.TempDir() + "/t.json"
	if err := nr.WriteHistory(path); err != nil {
		t.Fatal(err)
	}
	if got, err := JudgeHistory(path); err != nil || got.TokenRegressions != 1 || len(got.Judge()) != 1 {
		t.Errorf("a token regression judged %v, %+v", err, got.Result)
	}
	if _, err := JudgeHistory(t.TempDir() + "/none.json"); err == nil {
		t.Error("a missing file judged")
	}
}
