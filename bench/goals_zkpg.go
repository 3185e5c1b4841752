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
// limit times it; with mark, the figure says when it missed (for a goal
// that judges more than the cycle's time). The ratio cycle by cycle
// follows it.
func (rp *Report) cycleGoal(text, d, other string, limit float64, mark bool) Goal {
	g := Goal{Text: text}
	dv, ov := rp.p50(d), rp.p50(other)
	if dv == 0 || ov == 0 {
		return g
	}
	g.Judged = true
	r := float64(dv) / float64(ov)
	g.Met = r <= limit
	g.Measured = fmt.Sprintf("p50 %s = %sx %s (%s)", fmtDur(dv), sig3(r), rp.name(other), fmtDur(ov))
	if mark {
		g.Measured += missed(g.Met)
	}
	if p := rp.paired(d, other); p != "" {
		g.Measured += "; cycle by cycle " + p
	}
	return g
}

// zkGoals are the ZooKeeper targets: zklock's cycle within 1.05x of
// go-zookeeper's zk.Lock, and its hand-offs no slower at the tail.
func (rp *Report) zkGoals() []Goal {
	cycle := rp.cycleGoal("distlock ZooKeeper (Client.Acquire) p50 at most 1.05x go-zookeeper zk.Lock's, while issuing a fencing token and watching the connection state",
		"distlock-zk", "zk-lock", 1.05, false)
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

// Thresholds of the PostgreSQL goals against the raw advisory lock and
// its server-side queue (the pg-advisory row): the session mode's cycle
// and throughput, the lease mode's cycle, and the lease mode's hand-off
// at pgLeaseWaiters. The session-mode cycle was held to 1.20x before; a
// token that survives a crash costs a row write and a commit the raw lock
// does not make, so the bound is 2.0x now.
const (
	pgSessionCycleLimit = 2.0
	pgSessionRateFloor  = 0.6
	pgLeaseCycleLimit   = 3.0
	pgLeaseRateFloor    = 0.6
	pgLeaseGapP50Limit  = 4.0
	pgLeaseWaiters      = 64
)

// pgGoals are the PostgreSQL targets: the session-mode cycle within 2.0x
// of the raw advisory lock and unlock, and hand-offs as fair and as fast as
// the server's own queue.
func (rp *Report) pgGoals() []Goal {
	cycle := rp.cycleGoal(fmt.Sprintf("distlock PostgreSQL session mode (Client.Acquire) p50 at most %sx raw pg_advisory_lock + pg_advisory_unlock, token included (the bound was 1.20x)", sig3(pgSessionCycleLimit)),
		"distlock-pg", "pg-advisory", pgSessionCycleLimit, false)
	if cycle.Judged {
		cycle.Measured += "; " + rp.statementsPerCycle("distlock-pg")
	}

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

// statementsPerCycle states the statements a row's uncontended cycle sent,
// by name.
func (rp *Report) statementsPerCycle(id string) string {
	lr := rp.Res.Latency[id]
	if lr == nil || lr.Counted == 0 {
		return ""
	}
	return fmt.Sprintf("%s statements per cycle (%s)", perUnit(lr.Delta.Requests, lr.Counted), breakdownRequests(lr.Delta, lr.Counted))
}

// pgMoreGoals are the PostgreSQL targets added after the Redlock goals
// (numbered after them, so that the older numbers stay): the session
// mode's throughput, the lease mode's cycle and its hand-off against the
// server's queue.
func (rp *Report) pgMoreGoals() []Goal {
	rate := Goal{Text: fmt.Sprintf("distlock PostgreSQL session mode (Client.Acquire) throughput (%d goroutines, distinct keys) at least %sx raw pg_advisory_lock's",
		rp.Res.Params.ThroughputWorkers, sig3(pgSessionRateFloor))}
	if d, q := rp.rate("distlock-pg"), rp.rate("pg-advisory"); d > 0 && q > 0 {
		rate.Judged = true
		rate.Met = d >= pgSessionRateFloor*q
		rate.Measured = fmt.Sprintf("%s/s vs %s/s (%sx)%s; %s", fmtRate(d), fmtRate(q), sig3(d/q), missed(rate.Met), rp.statementsPerCycle("distlock-pg"))
		if r := rp.statementsPerCycle("pg-advisory"); r != "" {
			rate.Measured += "; raw: " + r
		}
	}

	cycle := rp.cycleGoal(fmt.Sprintf("distlock PostgreSQL lease mode (Client.Acquire) p50 at most %sx raw pg_advisory_lock + pg_advisory_unlock, token included", sig3(pgLeaseCycleLimit)),
		"distlock-pg-lease", "pg-advisory", pgLeaseCycleLimit, false)
	if cycle.Judged {
		cycle.Measured += "; " + rp.statementsPerCycle("distlock-pg-lease")
		if b := rp.p50("distlock-pg-lease-bouncer"); b > 0 {
			cycle.Measured += fmt.Sprintf("; through PgBouncer %s = %sx", fmtDur(b), sig3(float64(b)/float64(rp.p50("pg-advisory"))))
		}
	}

	n := rp.waitersNear(pgLeaseWaiters)
	h := Goal{Text: fmt.Sprintf("distlock PostgreSQL lease mode hand-off with %d waiters: grants/s at least %sx the server's own queue's (raw pg_advisory_lock) and gap p50 at most %sx its",
		n, sig3(pgLeaseRateFloor), sig3(pgLeaseGapP50Limit))}
	if d, q := rp.contention(n, "distlock-pg-lease"), rp.contention(n, "pg-advisory"); d != nil && q != nil && len(d.HandoffGap) > 0 && len(q.HandoffGap) > 0 {
		h.Judged = true
		dr, qr := grantRate(d), grantRate(q)
		dp, qp := quantile(d.HandoffGap, 0.5), quantile(q.HandoffGap, 0.5)
		rateOK, gapOK := dr >= pgLeaseRateFloor*qr, float64(dp) <= pgLeaseGapP50Limit*float64(qp)
		h.Met = rateOK && gapOK
		h.Measured = fmt.Sprintf("%s vs %s grants/s (%sx)%s; gap p50 %s vs %s (%sx)%s; gap p99 %s vs %s; %s statements per grant (%s); fairness %s, %d overtakes",
			fmtRate(dr), fmtRate(qr), sig3(dr/qr), missed(rateOK), fmtDur(dp), fmtDur(qp), sig3(float64(dp)/float64(qp)), missed(gapOK),
			fmtDur(quantile(d.HandoffGap, 0.99)), fmtDur(quantile(q.HandoffGap, 0.99)),
			perUnit(d.Delta.Requests, d.Grants), breakdownRequests(d.Delta, d.Grants), fmtRatio(worstFairness(d)), d.Overtakes)
		if rtt := rp.idleRTT(SvcPG); rtt > 0 && d.Handoffs > 0 {
			h.Measured += fmt.Sprintf("; waste %s per hand-off = %s idle round trips", fmtDur(d.Waste()), sig3(float64(d.Waste())/float64(rtt)))
		}
	}
	return []Goal{rate, cycle, h}
}
