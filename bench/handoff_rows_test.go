package bench

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"
)

var handoffRows = flag.String("handoff", "", "TestHandoffRows: measure only the 16-waiter hand-off of these subjects (IDs, comma-separated, from subjects*.go), at the full run's sizes; RESULTS.md is not written")

// TestHandoffRows takes the 16-waiter hand-off measurement of a few
// subjects alone, of any services, for comparing builds of one backend
// against a row that does not change (run it alternately on each build).
func TestHandoffRows(t *testing.T) {
	if *handoffRows == "" {
		t.Skip("measures for minutes: run with -handoff ID,ID")
	}
	want := map[string]bool{}
	for _, id := range strings.Split(*handoffRows, ",") {
		want[id] = true
	}
	var subs []Subject
	for _, s := range Subjects {
		if want[s.ID] && s.NotBuilt == "" {
			s.Measures = Contention
			subs = append(subs, s)
		}
	}
	if len(subs) != len(want) {
		t.Fatalf("%d of the %d subjects found", len(subs), len(want))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	r := NewRunner(t, NewEnv(t), FullParams, subs)
	const waiters = 16
	cont := r.contention(ctx, waiters)
	for _, s := range subs {
		if cr := cont[s.ID]; cr != nil {
			t.Logf("%d waiters %s: gap p50 %s p99 %s, waste/hand-off %s, %.0f grants/s", waiters, s.ID,
				fmtDur(quantile(cr.HandoffGap, 0.5)), fmtDur(quantile(cr.HandoffGap, 0.99)), fmtDur(cr.Waste()), grantRate(cr))
		}
	}
}
