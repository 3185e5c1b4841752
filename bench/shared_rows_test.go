package bench

import (
	"context"
	"flag"
	"testing"
	"time"
)

var sharedRows = flag.String("shared", "", "TestSharedRows: measure only the shared-lock rows of this service (for example etcd; all for every service), at the full run's sizes; RESULTS.md is not written")

// TestSharedRows takes the shared-lock measurement (a read-lock cycle of
// package rwlock against the same Client's lock cycle) of one service's
// distlock rows, those of the semaphore measurement. A row whose backend
// grants no shared locks is logged as such; the test fails when no row of
// the service grants them, or when a measured row lacks its cycles.
func TestSharedRows(t *testing.T) {
	if *sharedRows == "" {
		t.Skip("measures for a minute: run with -shared NAME")
	}
	var subs []Subject
	for _, s := range Subjects {
		if (*sharedRows == "all" || s.Service == *sharedRows) && s.Has(Semaphore) {
			subs = append(subs, s)
		}
	}
	if len(subs) == 0 {
		t.Fatalf("no distlock rows of service %q", *sharedRows)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	r := NewRunner(t, NewEnv(t), FullParams, subs)
	res := r.shared(ctx, subs)
	measured := 0
	for _, s := range subs {
		sr := res[s.ID]
		if sr.NoShared != "" {
			t.Logf("%s: no shared locks: %s", s.Name, sr.NoShared)
			continue
		}
		measured++
		want := FullParams.Rounds * FullParams.LatencyOps
		if len(sr.Lock) != want || len(sr.Read) != want {
			t.Errorf("%s: %d lock and %d read-lock cycles, want %d of each", s.Name, len(sr.Lock), len(sr.Read), want)
			continue
		}
		l50, r50 := quantile(sr.Lock, 0.5), quantile(sr.Read, 0.5)
		l99, r99 := quantile(sr.Lock, 0.99), quantile(sr.Read, 0.99)
		t.Logf("%s: lock p50 %s p99 %s; read lock p50 %s p99 %s; read/lock p50 %sx p99 %sx; requests/cycle lock %s read %s",
			s.Name, fmtDur(l50), fmtDur(l99), fmtDur(r50), fmtDur(r99),
			sig3(float64(r50)/float64(l50)), sig3(float64(r99)/float64(l99)),
			perUnit(sr.LockDelta.Requests, sr.Counted), perUnit(sr.ReadDelta.Requests, sr.Counted))
	}
	if measured == 0 {
		t.Fatalf("no row of service %q grants shared locks", *sharedRows)
	}
}
