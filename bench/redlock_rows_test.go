package bench

import (
	"context"
	"flag"
	"testing"
	"time"
)

var redlockRows = flag.Bool("redlock", false, "TestRedlockRows: measure the Redlock rows alone (cycle, throughput, hand-off at the full run's sizes) and log goals 15-17, without writing RESULTS.md")

// TestRedlockRows measures the Redlock subjects alone, at the sizes of the
// full run, and logs the Redlock goals: a quicker check of one row than
// the full run, for work on that backend.
func TestRedlockRows(t *testing.T) {
	if !*redlockRows {
		t.Skip("measures for minutes: run with -redlock")
	}
	var subs []Subject
	for _, s := range Subjects {
		if s.Service == SvcRedlock {
			subs = append(subs, s)
		}
	}
	p := FullParams
	p.HeldSizes = nil
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	res := NewRunner(t, NewEnv(t), p, subs).Run(ctx)
	if t.Failed() {
		return
	}
	rp := &Report{Subjects: subs, Res: res}
	for _, s := range subs {
		if l := res.Latency[s.ID]; l != nil {
			t.Logf("%s: cycle p50 %v", s.Name, rp.p50(s.ID))
		}
	}
	for _, g := range rp.redlockGoals() {
		t.Logf("%s: %s (met: %v)", g.Text, g.Measured, g.Met)
	}
}

var redlockCycle = flag.Bool("redlockcycle", false, "TestRedlockCycle: measure the Redlock rows' uncontended cycle alone (the full run's sizes) and log goals 15 and 16, for A/B runs of redlock's builds")

// TestRedlockCycle measures the uncontended cycle of the Redlock subjects
// alone, taking turns as the full run does, and logs each row's p50 and
// requests per cycle and the cycle goals: an A/B of redlock's builds in
// seconds (run each build in turn, several times, and compare the ratios
// to redsync's row).
func TestRedlockCycle(t *testing.T) {
	if !*redlockCycle {
		t.Skip("measures for a minute: run with -redlockcycle")
	}
	var subs []Subject
	for _, s := range Subjects {
		if s.Service == SvcRedlock && s.Measures&Latency != 0 {
			subs = append(subs, s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r := NewRunner(t, NewEnv(t), FullParams, subs)
	res := &Results{Params: FullParams, Latency: r.latency(ctx)}
	if t.Failed() {
		return
	}
	rp := &Report{Subjects: subs, Res: res}
	for _, s := range subs {
		if lr := res.Latency[s.ID]; lr != nil {
			t.Logf("cycle %s: p50 %s, %.2f requests/cycle", s.ID, fmtDur(rp.p50(s.ID)), float64(lr.Delta.Requests)/float64(max(1, lr.Counted)))
		}
	}
	for _, g := range rp.redlockGoals()[:2] {
		t.Logf("%s: %s (met: %v)", g.Text, g.Measured, g.Met)
	}
}
