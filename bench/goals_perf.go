package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Thresholds of the performance goals: the no-herd bound on requests per
// grant and on fairness in the default Redis mode, the uncontended cycle
// against the floor, and the etcd hand-off tail across Clients.
const (
	herdRequestsPerGrant = 3.5
	herdFairness         = 1.2
	redisFloorLimit      = 1.10
	etcdGapP99Limit      = 10 * time.Millisecond
)

// Waiters at which the performance goals are judged. A run that did not
// measure them (the smoke run) is judged at the nearest level it has, and
// the goal's text says which.
const (
	herdWaiters    = 64
	handoffWaiters = 16
)

// waitersNear returns want when the run measured it, else the measured
// level closest to it (0 when the run has none).
func (rp *Report) waitersNear(want int) int {
	ws := rp.Res.Params.ContentionWaiters
	if slices.Contains(ws, want) {
		return want
	}
	best := 0
	for _, n := range ws {
		if best == 0 || absInt(n-want) < absInt(best-want) {
			best = n
		}
	}
	return best
}

func absInt(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// contention is the result of subject id at n waiters, nil if not measured
// or without a grant.
func (rp *Report) contention(n int, id string) *ContentionResult {
	if cr := rp.Res.Contention[n][id]; cr != nil && cr.Grants > 0 {
		return cr
	}
	return nil
}

// perfGoals are the performance targets: no herd in the default Redis
// mode, its uncontended cycle at the floor, throughput at least the peers',
// hand-offs as fast as PostgreSQL's server queue, etcd hand-offs across
// Clients within 10 ms, and the file backend's cycle against flock(2).
func (rp *Report) perfGoals() []Goal {
	return []Goal{rp.herdGoal(), rp.redisCycleGoal(), rp.throughputGoal(), rp.pgHandoffGoal(), rp.etcdGapGoal(), rp.fileGoal()}
}

// herdGoal judges the default Redis mode (the queue) with many waiters:
// requests per grant and fairness. The unordered option's figures are
// stated beside it, as its cost.
func (rp *Report) herdGoal() Goal {
	n := rp.waitersNear(herdWaiters)
	g := Goal{Text: fmt.Sprintf("no herd by default: distlock Redis (Client.Acquire, default mode) with %d waiters in separate Clients on one key: at most %s client requests per grant and max/min grants per waiter at most %s",
		n, sig3(herdRequestsPerGrant), sig3(herdFairness))}
	cr := rp.contention(n, "distlock-redis")
	if cr == nil {
		return g
	}
	g.Judged = true
	per := float64(cr.Delta.Requests) / float64(cr.Grants)
	fair := worstFairness(cr)
	reqOK, fairOK := per <= herdRequestsPerGrant, fair <= herdFairness
	g.Met = reqOK && fairOK
	g.Measured = fmt.Sprintf("%s requests per grant (%d requests for %d grants, %d hand-offs)%s; fairness %s%s, %d overtakes; gap p99 %s; per grant: %s, %s server ops including those inside scripts",
		sig3(per), cr.Delta.Requests, cr.Grants, cr.Handoffs, missed(reqOK), fmtRatio(fair), missed(fairOK), cr.Overtakes, fmtDur(quantile(cr.HandoffGap, 0.99)),
		breakdownRequests(cr.Delta, cr.Grants), sig3(float64(cr.Delta.Ops)/float64(cr.Grants)))
	if u := rp.contention(n, "distlock-redis-unordered"); u != nil {
		g.Measured += fmt.Sprintf("; its cost with redislock.WithUnordered(): %s requests per grant, fairness %s, gap p99 %s",
			sig3(float64(u.Delta.Requests)/float64(u.Grants)), fmtRatio(worstFairness(u)), fmtDur(quantile(u.HandoffGap, 0.99)))
	}
	return g
}

// redisCycleGoal judges the default Redis cycle against the floor, with
// the requests and server commands per cycle beside it.
func (rp *Report) redisCycleGoal() Goal {
	g := rp.cycleGoal(fmt.Sprintf("uncontended Redis cycle: distlock Redis (Client.Acquire + Release, default mode, fencing token) p50 at most %sx the floor (SET NX PX + compare-and-DEL)", sig3(redisFloorLimit)),
		"distlock-redis", "floor", redisFloorLimit)
	if !g.Judged {
		return g
	}
	var counts []string
	for _, id := range []string{"distlock-redis", "floor"} {
		if lr := rp.Res.Latency[id]; lr != nil && lr.Counted > 0 {
			counts = append(counts, fmt.Sprintf("%s %s requests and %s server commands per cycle", rp.name(id),
				sig3(float64(lr.Delta.Requests)/float64(lr.Counted)), sig3(float64(lr.Delta.Ops)/float64(lr.Counted))))
		}
	}
	if len(counts) > 0 {
		g.Measured += "; " + strings.Join(counts, ", ")
	}
	return g
}

// throughputGoal judges distlock's default Redis and etcd rows against
// bsm/redislock and concurrency.Mutex on distinct keys.
func (rp *Report) throughputGoal() Goal {
	g := Goal{Text: fmt.Sprintf("throughput (%d goroutines, distinct keys): distlock Redis (default mode) at least bsm/redislock's, distlock etcd at least concurrency.Mutex's",
		rp.Res.Params.ThroughputWorkers), Met: true}
	var parts []string
	for _, p := range [][2]string{{"distlock-redis", "bsm"}, {"distlock-etcd", "etcd-mutex"}} {
		d, o := rp.rate(p[0]), rp.rate(p[1])
		if d == 0 || o == 0 {
			g.Met = false // a half-measured goal is not met
			continue
		}
		g.Judged = true
		ok := d >= o
		g.Met = g.Met && ok
		parts = append(parts, fmt.Sprintf("%s %s/s vs %s %s/s (%sx)%s", rp.name(p[0]), fmtRate(d), rp.name(p[1]), fmtRate(o), sig3(d/o), missed(ok)))
	}
	if len(parts) < 2 && g.Judged {
		parts = append(parts, "one pair not measured (missed)")
	}
	g.Measured = strings.Join(parts, "; ")
	return g
}

// pgHandoffGoal judges the default Redis mode's hand-offs against
// PostgreSQL's server-side queue (raw pg_advisory_lock).
func (rp *Report) pgHandoffGoal() Goal {
	n := rp.waitersNear(handoffWaiters)
	g := Goal{Text: fmt.Sprintf("hand-off as fast as PostgreSQL's server-side queue: distlock Redis (default mode) with %d waiters: gap p99 at most %sx raw pg_advisory_lock's and grants/s at least its",
		n, sig3(pgGapP99Limit))}
	d, q := rp.contention(n, "distlock-redis"), rp.contention(n, "pg-advisory")
	if d == nil || q == nil || len(d.HandoffGap) == 0 || len(q.HandoffGap) == 0 {
		return g
	}
	g.Judged = true
	dp, qp := quantile(d.HandoffGap, 0.99), quantile(q.HandoffGap, 0.99)
	dr, qr := grantRate(d), grantRate(q)
	gapOK, rateOK := float64(dp) <= pgGapP99Limit*float64(qp), dr >= qr
	g.Met = gapOK && rateOK
	g.Measured = fmt.Sprintf("gap p99 %s vs %s (%sx; p50 %s vs %s)%s; %s vs %s grants/s (%sx)%s",
		fmtDur(dp), fmtDur(qp), sig3(float64(dp)/float64(qp)), fmtDur(quantile(d.HandoffGap, 0.5)), fmtDur(quantile(q.HandoffGap, 0.5)), missed(gapOK),
		fmtRate(dr), fmtRate(qr), sig3(dr/qr), missed(rateOK))
	return g
}

// etcdGapGoal judges distlock etcd's hand-off tail with waiters in
// separate Clients, concurrency.Mutex's beside it.
func (rp *Report) etcdGapGoal() Goal {
	n := rp.waitersNear(handoffWaiters)
	g := Goal{Text: fmt.Sprintf("etcd across processes: distlock etcd (Client.Acquire) with %d waiters in separate Clients: hand-off gap p99 at most %s",
		n, fmtDur(etcdGapP99Limit))}
	d := rp.contention(n, "distlock-etcd")
	if d == nil || len(d.HandoffGap) == 0 {
		return g
	}
	g.Judged = true
	dp := quantile(d.HandoffGap, 0.99)
	g.Met = dp <= etcdGapP99Limit
	g.Measured = fmt.Sprintf("gap p99 %s (p50 %s)%s", fmtDur(dp), fmtDur(quantile(d.HandoffGap, 0.5)), missed(g.Met))
	if m := rp.contention(n, "etcd-mutex"); m != nil && len(m.HandoffGap) > 0 {
		mp := quantile(m.HandoffGap, 0.99)
		g.Measured += fmt.Sprintf("; %s: gap p99 %s (p50 %s); distlock's p99 is %sx its", rp.name("etcd-mutex"), fmtDur(mp), fmtDur(quantile(m.HandoffGap, 0.5)), sig3(float64(dp)/float64(mp)))
	}
	return g
}

// fileGoal states the filelock cycle against flock(2): the goal sets no
// bound on it, so the ratio is stated, not judged. The CLI's whole-process
// cost against flock(1) is measured by TestCLIRun, outside results.json.
func (rp *Report) fileGoal() Goal {
	g := Goal{Text: "`distlock run` overhead: stated against flock(1) for `run KEY -- true` (measured by TestCLIRun -cli N, not in this table); " +
		"distlock filelock (Client.Acquire) cycle against raw flock(2), no bound set: the ratio is stated"}
	d, f := rp.p50("distlock-file"), rp.p50("flock")
	if d == 0 || f == 0 {
		return g
	}
	g.Stated = true
	g.Measured = fmt.Sprintf("p50 %s = %sx %s (%s)", fmtDur(d), sig3(float64(d)/float64(f)), rp.name("flock"), fmtDur(f))
	if t := rp.p50("flock-token"); t > 0 {
		g.Measured += fmt.Sprintf(", %sx %s (%s)", sig3(float64(d)/float64(t)), rp.name("flock-token"), fmtDur(t))
	}
	return g
}
