package bench

import (
	"fmt"
	"strings"
)

// rowsGoal judges that the run reports the rows of the packages built on
// the lock: elections (a resignation to the next term, against etcd's
// concurrency.Election), permits (a permit cycle against the same
// backend's lock cycle) and partitioning (a group settling after a join
// and after a kill). Each part states its figures. Partitioning is not
// part of the full run (it waits out the package's reconcile interval,
// minimum hold and TTL on every trial: minutes): its part names the
// command that measures it, and the verdict rests on the other two.
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
	d, e := rp.electionP50("distlock-etcd"), rp.electionP50(etcdElectionSubject.ID)
	switch {
	case len(el) == 0:
		g.Met = false
		parts = append(parts, "elections: no rows (missed)")
	case e <= 0:
		g.Met = false
		parts = append(parts, fmt.Sprintf("elections: %d distlock rows, p50 %s; no concurrency.Election row to compare with (missed)", len(el), strings.Join(el, ", ")))
	default:
		p := fmt.Sprintf("elections: %d distlock rows, p50 %s", len(el), strings.Join(el, ", "))
		if d > 0 {
			p += fmt.Sprintf("; etcd %sx concurrency.Election (%s)", sig3(d/e), fmtDurF(e))
		}
		parts = append(parts, p)
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

	parts = append(parts, fmt.Sprintf("partitioning: not in this run, not judged here: `%s` measures it alone, in minutes (its figures are in Findings)", partitionCommand))
	g.Measured = strings.Join(parts, "; ")
	return g
}
