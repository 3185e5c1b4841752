package bench

import (
	"context"
	"flag"
	"testing"
	"time"
)

var partitionRows = flag.String("partition", "", "TestPartitionRows: measure only the partitioning rows of this service (for example etcd; all for every service), at the full sizes; RESULTS.md is not written")

// TestPartitionRows takes the partitioning measurement of one service's
// distlock rows (those of the semaphore measurement): the time for a group
// of package partition to settle after a member joins and after it is
// killed, and that time as a ratio of the package's stated bound. It fails
// only when a trial does not settle within a minute, never on a time.
func TestPartitionRows(t *testing.T) {
	if *partitionRows == "" {
		t.Skip("measures for minutes: run with -partition NAME")
	}
	subs := partitionSubjects(*partitionRows)
	if len(subs) == 0 {
		t.Fatalf("no distlock rows of service %q", *partitionRows)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	pp := PartitionFull
	r := NewRunner(t, NewEnv(t), FullParams, subs)
	res := r.partition(ctx, subs, pp)
	t.Logf("%d members (one joins, then is killed: its connections blackholed), %d units; reconcile %s, min hold %s, TTL %s; bound: join %s (reconcile×1.25 + min hold), kill %s (reconcile×1.25 + TTL; on ZooKeeper %s, with the session timeout)",
		pp.Members, pp.Units, fmtDur(pp.Reconcile), fmtDur(pp.MinHold), fmtDur(pp.TTL), fmtDur(pp.JoinBound()), fmtDur(pp.KillBound("")), fmtDur(pp.KillBound(SvcZK)))
	t.Logf("\n%s", partitionTable(subs, res, pp))
	for _, s := range subs {
		pr := res[s.ID]
		if len(pr.Join) != pp.Rounds {
			t.Errorf("%s: %d join trials, want %d", s.Name, len(pr.Join), pp.Rounds)
		}
		if pr.NoKill == "" && len(pr.Kill) != pp.Rounds {
			t.Errorf("%s: %d kill trials, want %d", s.Name, len(pr.Kill), pp.Rounds)
		}
	}
}

// TestPartitionSmoke takes the partitioning measurement at tiny sizes on
// the in-process row (joins only: no connection to cut), in seconds: the
// measurement works (every trial settles).
func TestPartitionSmoke(t *testing.T) {
	subs := partitionSubjects(SvcInProcess)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pp := PartitionSmoke
	r := NewRunner(t, NewEnv(t), SmokeParams, subs)
	res := r.partition(ctx, subs, pp)
	t.Logf("\n%s", partitionTable(subs, res, pp))
	for _, s := range subs {
		if pr := res[s.ID]; len(pr.Join) != pp.Rounds {
			t.Errorf("%s: %d join trials, want %d", s.Name, len(pr.Join), pp.Rounds)
		}
	}
}

// partitionSubjects are the distlock rows of service (all: every one) that
// the partitioning measurement takes.
func partitionSubjects(service string) []Subject {
	var subs []Subject
	for _, s := range Subjects {
		if (service == "all" || s.Service == service) && s.Kind == KindDistlock && s.Has(Semaphore) {
			subs = append(subs, s)
		}
	}
	return subs
}
