package torture

import (
	"encoding/json"
	"fmt"
	"os"
)

// A judged nemesis history, saved so that a violation a long run found can
// be judged again (by a fixed checker, or to build a regression test from
// it) without running the schedule again, which replays the same faults
// but not the same interleaving.

// NemesisHistory is what judging a nemesis run needs: its checked
// history and the parameters of its checks.
type NemesisHistory struct {
	Backend    string     `json:"backend"`
	Deployment string     `json:"deployment"`
	Mode       string     `json:"mode"`
	Seed       uint64     `json:"seed,string"`
	Steps      ClockSteps `json:"steps"`
	Omit       string     `json:"omit,omitempty"` // Run.lockModelsOmit
	PermitKey  string     `json:"permit_key,omitempty"`
	PermitRes  string     `json:"permit_res,omitempty"`
	Group      string     `json:"group,omitempty"`
	UnitRes    string     `json:"unit_res,omitempty"`
	Permits    bool       `json:"permits"`
	Units      bool       `json:"units"`
	Ops        []Op       `json:"ops"`
}

// WriteHistory writes nr's history and the parameters of its checks to
// path as JSON (see JudgeHistory).
func (nr *NemesisResult) WriteHistory(path string) error {
	if nr.history == nil {
		return fmt.Errorf("torture: the nemesis result has no history to write")
	}
	b, err := json.Marshal(nr.history)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// JudgeHistory reads a history WriteHistory wrote and judges it again:
// the mutex and token models, the proven overlaps and token regressions
// as Check counts them from the grants, the clock steps' excuse, and the
// recipes' invariants. Counts of Check's that need the run itself (the
// store's final values: lost updates) are left at zero; the stale writes
// are counted from the writes' records.
func JudgeHistory(path string) (*NemesisResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var h NemesisHistory
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("torture: %s: %v", path, err)
	}
	mode := Mode(-1)
	for _, m := range []Mode{Unfenced, Fenced, PGFenced} {
		if m.String() == h.Mode {
			mode = m
		}
	}
	if mode < 0 {
		return nil, fmt.Errorf("torture: %s: unknown store mode %q", path, h.Mode)
	}
	res := &Result{Backend: h.Backend, Scenario: "nemesis", Variant: fmt.Sprint(h.Seed), Mode: mode, Ops: h.Ops}
	nr := &NemesisResult{Result: res, Seed: h.Seed, Deployment: h.Deployment, Faults: map[string]int{}, history: &h}
	clients := map[string]int{}
	for _, op := range h.Ops {
		if _, ok := clients[op.Worker]; !ok && op.Worker != "harness" {
			clients[op.Worker] = len(clients)
		}
	}
	res.Verdicts, res.Histories = modelVerdicts(h.Ops, clients, h.Omit)
	res.countWrites(h.Ops)
	// The counts from the grants, as Check counts them.
	gs := nemesisGrants(h.Ops)
	res.Grants = len(gs)
	views := make([]grantView, len(gs))
	for i, g := range gs {
		views[i] = grantView{key: g.key, shared: g.shared, token: g.token, call: g.acqCall, ret: g.acqRet, live: g.live,
			name: func() string { return fmt.Sprintf("grant %d (%s, %s, token %d)", g.id, g.worker, g.key, g.token) }}
	}
	res.grantCounts(views)
	nr.judgeClock(h.Ops, h.Steps, h.Omit)
	nr.checkRecipes(nil, h.PermitKey, h.PermitRes, h.Group, h.UnitRes, h.Permits, h.Units, h.Steps)
	return nr, nil
}
