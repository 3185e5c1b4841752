package bench

import (
	"context"
	"flag"
	"testing"
	"time"
)

var semaphoreRows = flag.String("semaphore", "", "TestSemaphoreRows: measure only the semaphore rows of this service (for example etcd; all for every service), at the full run's sizes; RESULTS.md is not written")

// TestSemaphoreRows takes the semaphore measurement (a permit cycle
// against the same Client's lock cycle, and permits under contention) of
// one service's distlock rows alone. A row whose backend grants no permits
// yet (driver.Semaphores) is logged as such; the test fails when no row
// of the service grants them.
func TestSemaphoreRows(t *testing.T) {
	if *semaphoreRows == "" {
		t.Skip("measures for a minute: run with -semaphore NAME")
	}
	var subs []Subject
	for _, s := range Subjects {
		if (*semaphoreRows == "all" || s.Service == *semaphoreRows) && s.Has(Semaphore) {
			s.Measures = Semaphore
			subs = append(subs, s)
		}
	}
	if len(subs) == 0 {
		t.Fatalf("no semaphore rows of service %q", *semaphoreRows)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	r := NewRunner(t, NewEnv(t), FullParams, subs)
	res := &Results{Params: FullParams, Semaphore: r.semaphores(ctx)}
	checkResults(t, FullParams, res, subs)
	for _, s := range subs {
		sr := res.Semaphore[s.ID]
		switch {
		case sr == nil:
		case sr.NoPermits != "":
			t.Logf("%s: no permits: %s", s.Name, sr.NoPermits)
		default:
			r50, r99 := sr.ratios()
			t.Logf("%s: lock p50 %s p99 %s; permit (limit %d) p50 %s p99 %s; permit/lock p50 %sx p99 %sx; requests/cycle lock %s permit %s",
				s.Name, fmtDur(quantile(sr.Lock, 0.5)), fmtDur(quantile(sr.Lock, 0.99)), sr.Limit,
				fmtDur(quantile(sr.Permit, 0.5)), fmtDur(quantile(sr.Permit, 0.99)), sig3(r50), sig3(r99),
				perUnit(sr.LockDelta.Requests, sr.Counted), perUnit(sr.PermitDelta.Requests, sr.Counted))
			if sc := sr.Contended; sc != nil {
				t.Logf("%s: %d workers on %d permits: %d grants, %s/s, wait p50 %s p99 %s, use %.0f%%, peak %d, %s requests/grant, %d violations",
					s.Name, sc.Workers, sc.Limit, sc.Grants, fmtRate(float64(sc.Grants)/sc.Total.Seconds()),
					fmtDur(quantile(sc.Waits, 0.5)), fmtDur(quantile(sc.Waits, 0.99)), 100*sc.Use(), sc.Peak,
					perUnit(sc.Delta.Requests, sc.Grants), sc.Violations)
			}
		}
	}
}
