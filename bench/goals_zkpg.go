package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// numbered appends goals after the ones already judged, numbering them in
// order.
func numbered(goals []Goal, more ...Goal) []Goal {
	for _, g := range more {
		g.N = len(goals) + 1
		goals = append(goals, g)
	}
	return goals
}

// worstFairness is the largest max/min ratio over a contention result's
// rounds; +Inf when a waiter had no grant in some round.
func worstFairness(cr *ContentionResult) float64 {
	if len(cr.Fairness) == 0 {
		return math.NaN()
	}
	if slices.Min(cr.Fairness) < 0 {
		return math.Inf(1)
	}
	return slices.Max(cr.Fairness)
}

func fmtRatio(v float64) string {
	if math.IsInf(v, 1) {
		return "∞"
	}
	return sig3(v)
}

// grantRate is grants per second of wall time over a contention result's
// rounds.
func grantRate(cr *ContentionResult) float64 {
	if cr.Total <= 0 {
		return 0
	}
	return float64(cr.Grants) / cr.Total.Seconds()
}

// cycleGoal judges distlock subject d's p50 cycle against other's, at most
// limit times it.
func (rp *Report) cycleGoal(text, d, other string, limit float64) Goal {
	g := Goal{Text: text}
	dv, ov := rp.p50(d), rp.p50(other)
	if dv == 0 || ov == 0 {
		return g
	}
	g.Judged = true
	r := float64(dv) / float64(ov)
	g.Met = r <= limit
	g.Measured = fmt.Sprintf("p50 %s = %sx %s (%s)", fmtDur(dv), sig3(r), rp.name(other), fmtDur(ov))
	return g
}

// zkGoals are the ZooKeeper targets: zklock's cycle within 1.05x of
// go-zookeeper's zk.Lock, and its hand-offs no slower at the tail.
func (rp *Report) zkGoals() []Goal {
	cycle := rp.cycleGoal("distlock ZooKeeper (Client.Acquire) p50 at most 1.05x go-zookeeper zk.Lock's, while issuing a fencing token and watching the connection state",
		"distlock-zk", "zk-lock", 1.05)
	if cycle.Judged {
		if f := rp.p50("zk-floor"); f > 0 {
			cycle.Measured += fmt.Sprintf("; %sx the floor (%s, %s)", sig3(float64(rp.p50("distlock-zk"))/float64(f)), rp.name("zk-floor"), fmtDur(f))
		}
	}

	gap := Goal{Text: "distlock ZooKeeper hand-off gap p99 below go-zookeeper zk.Lock's (at every number of waiters)", Met: true}
	var parts []string
	for _, n := range rp.Res.Params.ContentionWaiters {
		d, z := rp.Res.Contention[n]["distlock-zk"], rp.Res.Contention[n]["zk-lock"]
		if d == nil || z == nil || len(d.HandoffGap) == 0 || len(z.HandoffGap) == 0 {
			continue
		}
		gap.Judged = true
		dp, zp := quantile(d.HandoffGap, 0.99), quantile(z.HandoffGap, 0.99)
		ok := dp < zp
		gap.Met = gap.Met && ok
		parts = append(parts, fmt.Sprintf("%d waiters: %s vs %s (%sx; p50 %s vs %s)%s", n, fmtDur(dp), fmtDur(zp), sig3(float64(dp)/float64(zp)),
			fmtDur(quantile(d.HandoffGap, 0.5)), fmtDur(quantile(z.HandoffGap, 0.5)), missed(ok)))
	}
	gap.Measured = strings.Join(parts, "; ")
	return []Goal{cycle, gap}
}

// Thresholds of the PostgreSQL hand-off goal: "as fair" is a max/min ratio
// no worse than the server queue's or than 1.2 (the bound of the Redis
// no-herd goal), "as fast" a gap p99 within 1.5x the queue's (the bound of
// the Redis hand-off goal) and at least as many grants per second.
const (
	pgFairnessFloor = 1.2
	pgGapP99Limit   = 1.5
)

// pgGoals are the PostgreSQL targets: the session-mode cycle within 1.20x
// of the raw advisory lock and unlock, and hand-offs as fair and as fast as
// the server's own queue.
func (rp *Report) pgGoals() []Goal {
	cycle := rp.cycleGoal("distlock PostgreSQL session mode (Client.Acquire) p50 at most 1.20x raw pg_advisory_lock + pg_advisory_unlock, token included",
		"distlock-pg", "pg-advisory", 1.20)

	h := Goal{Text: fmt.Sprintf("distlock PostgreSQL session mode hand-off as fair and as fast as the server's own queue (raw pg_advisory_lock): "+
		"fairness at most max(the queue's, %s), gap p99 at most %sx the queue's, grants/s at least the queue's (at every number of waiters)",
		sig3(pgFairnessFloor), sig3(pgGapP99Limit)), Met: true}
	var parts []string
	for _, n := range rp.Res.Params.ContentionWaiters {
		d, q := rp.Res.Contention[n]["distlock-pg"], rp.Res.Contention[n]["pg-advisory"]
		if d == nil || q == nil || len(d.HandoffGap) == 0 || len(q.HandoffGap) == 0 {
			continue
		}
		h.Judged = true
		df, qf := worstFairness(d), worstFairness(q)
		dp, qp := quantile(d.HandoffGap, 0.99), quantile(q.HandoffGap, 0.99)
		dr, qr := grantRate(d), grantRate(q)
		fairOK := df <= max(qf, pgFairnessFloor)
		gapOK := float64(dp) <= pgGapP99Limit*float64(qp)
		rateOK := dr >= qr
		h.Met = h.Met && fairOK && gapOK && rateOK
		parts = append(parts, fmt.Sprintf("%d waiters: fairness %s vs %s%s; gap p99 %s vs %s (%sx; p50 %s vs %s)%s; %s vs %s grants/s%s",
			n, fmtRatio(df), fmtRatio(qf), missed(fairOK),
			fmtDur(dp), fmtDur(qp), sig3(float64(dp)/float64(qp)), fmtDur(quantile(d.HandoffGap, 0.5)), fmtDur(quantile(q.HandoffGap, 0.5)), missed(gapOK),
			fmtRate(dr), fmtRate(qr), missed(rateOK)))
	}
	h.Measured = strings.Join(parts, "; ")
	return []Goal{cycle, h}
}
