package bench

import (
	"fmt"
	"strings"
)

// rowsGoal judges that the run reports the rows of the packages built on
// the lock: elections (a resignation to the next term, against etcd's
// concurrency.Election), permits (a permit cycle against the same
// backend's lock cycle) and partitioning (a group settling after a join
// and after a kill). Each part states its figures; a part the run lacks
// says where it is measured.
func (rp *Report) rowsGoal() Goal {
	g := Goal{Text: "the run reports rows of elections (resignation to the next term, against etcd's concurrency.Election), " +
		"permits (a permit cycle against the same backend's lock cycle) and partitioning (settling after a join and after a kill)", Judged: true, Met: true}
	var parts []string

	var el []string
	for _, s := range rp.Subjects {
		if er := rp.Res.Election[s.ID]; er != nil && len(er.Gaps) > 0 && s.Kind == KindDistlock {
			el = append(el, fmt.Sprintf("%s %s", s.Service, fmtDur(quantile(er.Gaps, 0.5))))
		}
	}
	if d, e := rp.electionP50("distlock-etcd"), rp.electionP50(etcdElectionSubject.ID); len(el) > 0 && e > 0 {
		p := fmt.Sprintf("elections: %d distlock rows, p50 %s", len(el), strings.Join(el, ", "))
		if d > 0 {
			p += fmt.Sprintf("; etcd %sx concurrency.Election (%s)", sig3(d/e), fmtDurF(e))
		}
		parts = append(parts, p)
	} else {
		g.Met = false
		parts = append(parts, "elections: no rows (missed)")
	}

	var sem []string
	for _, s := range rp.Subjects {
		if sr := rp.Res.Semaphore[s.ID]; sr != nil && sr.NoPermits == "" {
			if r50, _ := sr.ratios(); r50 > 0 {
				sem = append(sem, fmt.Sprintf("%s %sx", rp.name(s.ID), sig3(r50)))
			}
		}
	}
	if len(sem) > 0 {
		parts = append(parts, fmt.Sprintf("permits: %d rows, permit/lock p50 %s", len(sem), strings.Join(sem, ", ")))
	} else {
		g.Met = false
		parts = append(parts, "permits: no rows (missed)")
	}

	// Partitioning waits out the package's reconcile interval, minimum hold
	// and TTL on every trial: minutes, so it is measured alone.
	g.Met = false
	parts = append(parts, fmt.Sprintf("partitioning: not in this run (missed): `%s` measures it alone, in minutes (see Findings)", partitionCommand))
	g.Measured = strings.Join(parts, "; ")
	return g
}
