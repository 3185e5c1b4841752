package bench

import (
	"context"
	"flag"
	"testing"
	"time"
)

var electionRows = flag.String("election", "", "TestElectionRows: measure only the election rows of this service (for example etcd; all for every service), at the full run's sizes; RESULTS.md is not written")

// TestElectionRows takes the election measurement (a resignation to the
// next leader's term) of one service's subjects alone: on etcd, distlock's
// election against concurrency.Election, taking turns.
func TestElectionRows(t *testing.T) {
	if *electionRows == "" {
		t.Skip("measures for a minute: run with -election NAME")
	}
	var subs []Subject
	for _, s := range Subjects {
		if (*electionRows == "all" || s.Service == *electionRows) && s.Has(Election) {
			s.Measures = Election
			subs = append(subs, s)
		}
	}
	if len(subs) == 0 {
		t.Fatalf("no election rows of service %q", *electionRows)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	r := NewRunner(t, NewEnv(t), FullParams, subs)
	res := &Results{Params: FullParams, Election: r.elections(ctx)}
	checkResults(t, FullParams, res, subs)
	rp := &Report{Subjects: subs, Res: res}
	for _, s := range subs {
		if er := res.Election[s.ID]; er != nil {
			t.Logf("%s: %d hand-offs, resignation to next term p50 %s p99 %s", s.Name, er.Handoffs,
				fmtDur(quantile(er.Gaps, 0.5)), fmtDur(quantile(er.Gaps, 0.99)))
		}
	}
	for _, d := range subs {
		for _, o := range subs {
			if d.Kind == KindDistlock && o.Kind != KindDistlock && o.Service == d.Service {
				dv, ov := rp.electionP50(d.ID), rp.electionP50(o.ID)
				if dv > 0 && ov > 0 {
					t.Logf("%s / %s: p50 %sx", d.Name, o.Name, sig3(dv/ov))
				}
			}
		}
	}
}
