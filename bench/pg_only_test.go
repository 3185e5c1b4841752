package bench

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"
)

var pgOnly = flag.Bool("pg", false, "TestPGOnly: measure only the PostgreSQL subjects' cycle and hand-offs (FullParams' latency and contention runs) and log goals 7 and 8 and the lease-mode hand-off rows; RESULTS.md is not written")

// TestPGOnly takes the PostgreSQL part of the full run alone, for
// comparing builds of pglock: run it alternately on each build (the
// subjects take turns within a run, so the ratios to the raw rows are the
// figures to compare).
func TestPGOnly(t *testing.T) {
	if !*pgOnly {
		t.Skip("run with -pg")
	}
	var subjects []Subject
	for _, s := range Subjects {
		if s.Service == SvcPG {
			s.Measures &^= Throughput | Held
			subjects = append(subjects, s)
		}
	}
	p := FullParams
	p.HeldSizes = nil
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	r := NewRunner(t, NewEnv(t), p, subjects)
	res := &Results{Params: p, Started: time.Now(), Contention: map[int]map[string]*ContentionResult{}}
	res.Latency = r.latency(ctx)
	for _, n := range p.ContentionWaiters {
		res.Contention[n] = r.contention(ctx, n)
	}
	rp := &Report{Subjects: subjects, Res: res}
	for _, g := range rp.pgGoals() {
		t.Logf("goal: %s: %s (met %v)", g.Text, g.Measured, g.Met)
	}
	for _, s := range subjects {
		if lr := res.Latency[s.ID]; lr != nil {
			t.Logf("cycle %s: p50 %s, %.2f requests/cycle", s.ID, fmtDur(quantile(lr.Samples, 0.5)), float64(lr.Delta.Requests)/float64(max(1, lr.Counted)))
		}
	}
	for _, n := range p.ContentionWaiters {
		for _, s := range subjects {
			cr := res.Contention[n][s.ID]
			if cr == nil {
				continue
			}
			t.Logf("%d waiters %s: grants %d hand-offs %d waste/hand-off %s gap p50 %s p99 %s fairness %s requests/grant %.2f grants/s %.0f errors %v",
				n, s.ID, cr.Grants, cr.Handoffs, fmtDur(cr.Waste()), fmtDur(quantile(cr.HandoffGap, 0.5)), fmtDur(quantile(cr.HandoffGap, 0.99)),
				fmtRatio(worstFairness(cr)), float64(cr.Delta.Requests)/float64(max(1, cr.Grants)), grantRate(cr), cr.Errors)
		}
	}
	fmt.Println() // keep the log apart from the PASS line
}
