package bench

import (
	"context"
	"flag"
	"testing"
	"time"
)

var serviceRows = flag.String("service", "", "TestServiceRows: measure only this service's subjects (cycle, throughput, hand-off with 16 waiters, at the full run's sizes), for example etcd or ZooKeeper; RESULTS.md is not written")

// TestServiceRows takes the cycle, throughput and 16-waiter hand-off
// measurements of one service's subjects alone, for comparing builds of
// one backend: run it alternately on each build (the subjects take turns
// within a run, so the ratios to the peers' rows are the figures to
// compare).
func TestServiceRows(t *testing.T) {
	if *serviceRows == "" {
		t.Skip("measures for minutes: run with -service NAME")
	}
	var subs []Subject
	for _, s := range Subjects {
		if s.Service == *serviceRows && s.NotBuilt == "" {
			s.Measures &^= Held
			subs = append(subs, s)
		}
	}
	if len(subs) == 0 {
		t.Fatalf("no subjects of service %q", *serviceRows)
	}
	p := FullParams
	p.HeldSizes = nil
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	r := NewRunner(t, NewEnv(t), p, subs)
	lat := r.latency(ctx)
	tp := r.throughput(ctx)
	const waiters = 16
	cont := r.contention(ctx, waiters)
	for _, s := range subs {
		if lr := lat[s.ID]; lr != nil {
			t.Logf("cycle %s: p50 %s, %.2f requests/cycle", s.ID, fmtDur(quantile(lr.Samples, 0.5)), float64(lr.Delta.Requests)/float64(max(1, lr.Counted)))
		}
	}
	for _, s := range subs {
		if tr := tp[s.ID]; tr != nil && tr.Elapsed > 0 {
			t.Logf("throughput %s: %.0f/s", s.ID, float64(tr.Cycles)/tr.Elapsed.Seconds())
		}
	}
	for _, s := range subs {
		if cr := cont[s.ID]; cr != nil {
			t.Logf("%d waiters %s: gap p50 %s p99 %s, waste/hand-off %s", waiters, s.ID,
				fmtDur(quantile(cr.HandoffGap, 0.5)), fmtDur(quantile(cr.HandoffGap, 0.99)), fmtDur(cr.Waste()))
		}
	}
}
