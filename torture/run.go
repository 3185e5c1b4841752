package torture

import (
	"fmt"
	"sync/atomic"
	"testing"
)

var runs atomic.Int64

// RunScenario runs sc against target with the store in mode, checks the
// history and returns the result. visPath, when not empty, receives
// porcupine's visualization. A scenario that cannot be carried out (a
// server that does not start, a worker that dies) fails the test.
func RunScenario(t testing.TB, sc Scenario, target Target, mode Mode, p Params, visPath string) *Result {
	t.Helper()
	res := &Result{Backend: target.Kind, Scenario: sc.Name, Variant: sc.Variant, Mode: mode,
		Expect: sc.Expect[target.Kind], Why: sc.Why[target.Kind], Rounds: p.Rounds}
	n := runs.Add(1)
	r := NewRun(t, mode)
	if mode == PGFenced {
		if err := r.Store.usePostgres(target.Data); err != nil {
			r.Close()
			t.Fatal(err)
		}
	}
	f := &Fixture{T: t, Run: r, Target: target, P: p, Res0: res, Election: sc.Election, Permit: sc.Permit, RW: sc.RW,
		Key: fmt.Sprintf("torture/%s/%s/%d", sc.ID(), mode, n),
		Res: fmt.Sprintf("res-%s-%s-%d", sc.Name, mode, n)}
	run := sc.Run
	if on := sc.RunOn[target.Kind]; on != nil {
		run = on
	}
	if err := run(f); err != nil {
		r.Close()
		t.Fatalf("torture: %s on %s (%s): %v", sc.ID(), target.Kind, mode, err)
	}
	if f.observer != nil {
		f.checkObserved()
	}
	return r.Check(res, visPath)
}
