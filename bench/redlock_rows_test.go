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
