package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Thresholds of the performance goals: the no-herd bound on requests,
// server commands per grant and fairness in the default Redis mode, the
// uncontended cycle's server commands and its time against bsm/redislock,
// the etcd hand-off tail across Clients, and `distlock run` against
// flock(1). Server commands are those INFO commandstats counts: each script
// call and each command it runs.
const (
	herdRequestsPerGrant = 3.5
	herdOpsPerGrant      = 12
	herdFairness         = 1.2
	redisCycleOps        = 6
	redisBsmLimit        = 1.10
	etcdGapP99Limit      = 10 * time.Millisecond
	cliFlockLimit        = 3
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
// mode, its uncontended cycle's server commands and time against
// bsm/redislock, throughput at least the peers', hand-offs as fast as
// PostgreSQL's server queue, etcd hand-offs across Clients within 10 ms,
// and `distlock run` against flock(1).
func (rp *Report) perfGoals() []Goal {
	return []Goal{rp.herdGoal(), rp.redisCycleGoal(), rp.throughputGoal(), rp.pgHandoffGoal(), rp.etcdGapGoal(), rp.cliGoal()}
}

// herdGoal judges the default Redis mode (the queue) with many waiters:
// client requests and server commands per grant, and fairness. The
// server commands are broken down by name, to show where a miss goes. The
// unordered option's figures are stated beside it, as its cost.
func (rp *Report) herdGoal() Goal {
	n := rp.waitersNear(herdWaiters)
	g := Goal{Text: fmt.Sprintf("no herd by default: distlock Redis (Client.Acquire, default mode, a FIFO hand-off) with %d waiters in separate Clients on one key: at most %s client requests and at most %d server commands (scripts' inner commands included) per grant, and max/min grants per waiter at most %s",
		n, sig3(herdRequestsPerGrant), herdOpsPerGrant, sig3(herdFairness))}
	cr := rp.contention(n, "distlock-redis")
	if cr == nil {
		return g
	}
	g.Judged = true
	per := float64(cr.Delta.Requests) / float64(cr.Grants)
	ops := float64(cr.Delta.Ops) / float64(cr.Grants)
	fair := worstFairness(cr)
	reqOK, opsOK, fairOK := per <= herdRequestsPerGrant, ops <= herdOpsPerGrant, fair <= herdFairness
	g.Met = reqOK && opsOK && fairOK
	g.Measured = fmt.Sprintf("%s requests per grant (%d requests for %d grants, %d hand-offs; %s)%s; %s server commands per grant (%s)%s; fairness %s%s, %d overtakes; gap p99 %s",
		sig3(per), cr.Delta.Requests, cr.Grants, cr.Handoffs, breakdownRequests(cr.Delta, cr.Grants), missed(reqOK),
		sig3(ops), breakdown(cr.Delta.ByName, cr.Grants, 32), missed(opsOK),
		fmtRatio(fair), missed(fairOK), cr.Overtakes, fmtDur(quantile(cr.HandoffGap, 0.99)))
	if u := rp.contention(n, "distlock-redis-unordered"); u != nil {
		g.Measured += fmt.Sprintf("; its cost with redislock.WithUnordered(): %s requests per grant, fairness %s, gap p99 %s",
			sig3(float64(u.Delta.Requests)/float64(u.Grants)), fmtRatio(worstFairness(u)), fmtDur(quantile(u.HandoffGap, 0.99)))
	}
	return g
}

// redisCycleGoal judges the default Redis cycle's server commands, and its
// time against bsm/redislock (goal 1 holds it to the floor); the commands
// by name, bsm's and the floor's beside it.
func (rp *Report) redisCycleGoal() Goal {
	g := rp.cycleGoal(fmt.Sprintf("uncontended Redis cycle: distlock Redis (Client.Acquire + Release, default mode, fencing token) at most %d server commands per cycle (scripts' inner commands included) and p50 at most %sx bsm/redislock's",
		redisCycleOps, sig3(redisBsmLimit)), "distlock-redis", "bsm", redisBsmLimit, true)
	lr := rp.Res.Latency["distlock-redis"]
	if !g.Judged || lr == nil || lr.Counted == 0 {
		g.Judged, g.Met = false, false
		return g
	}
	ops := float64(lr.Delta.Ops) / float64(lr.Counted)
	opsOK := ops <= redisCycleOps
	g.Met = g.Met && opsOK
	g.Measured += fmt.Sprintf("; %s server commands per cycle (%s)%s", sig3(ops), breakdown(lr.Delta.ByName, lr.Counted, 32), missed(opsOK))
	for _, id := range []string{"bsm", "floor", "floor-token"} {
		if o := rp.Res.Latency[id]; o != nil && o.Counted > 0 {
			g.Measured += fmt.Sprintf("; %s %s (%s)", rp.name(id), sig3(float64(o.Delta.Ops)/float64(o.Counted)), breakdown(o.Delta.ByName, o.Counted, 32))
		}
	}
	// What a token costs by itself, with no check beyond the owner's: the
	// bound's distance from the least a token-issuing lock can do.
	if t, b := rp.p50("floor-token"), rp.p50("bsm"); t > 0 && b > 0 {
		g.Measured += fmt.Sprintf("; the floor with token's p50 %sx bsm/redislock's", sig3(float64(t)/float64(b)))
	}
	if f := rp.p50("floor"); f > 0 {
		g.Measured += fmt.Sprintf("; p50 %sx the floor (goal 1)", sig3(float64(rp.p50("distlock-redis"))/float64(f)))
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
		// Beside the Redis pair, what a token costs by itself (not judged).
		if t := rp.rate("floor-token"); p[1] == "bsm" && t > 0 {
			parts[len(parts)-1] += fmt.Sprintf(" [%s %s/s, %sx bsm/redislock's]", rp.name("floor-token"), fmtRate(t), sig3(t/o))
		}
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

// cliGoal judges `distlock run KEY -- true` against `flock FILE true`
// (the CLI measurement), with the rows that split distlock's cost beside
// it; the filelock cycle against flock(2) is
// stated after it, as the goal sets no bound on it.
func (rp *Report) cliGoal() Goal {
	g := Goal{Text: fmt.Sprintf("`distlock run KEY -- true` at most %dx `flock FILE true` (whole processes, interleaved); "+
		"distlock filelock (Client.Acquire) cycle against raw flock(2) stated beside it (no bound set)", cliFlockLimit)}
	var parts []string
	if c := rp.Res.CLI; c.ratio() > 0 {
		g.Judged = true
		r := c.ratio()
		g.Met = r <= cliFlockLimit
		p := fmt.Sprintf("%s = %sx flock(1) (%s), %d runs each%s", fmtDur(quantile(c.Rows[1].Samples, 0.5)), sig3(r), fmtDur(quantile(c.Rows[0].Samples, 0.5)), c.Runs, missed(g.Met))
		for _, row := range c.Rows[2:] {
			if !strings.Contains(row.Name, ", with ") {
				p += fmt.Sprintf("; %s %s", row.Name, fmtDur(quantile(row.Samples, 0.5)))
			}
		}
		parts = append(parts, p)
	} else {
		parts = append(parts, fmt.Sprintf("`distlock run` not measured in this run (`%s` measures it)", cliCommand))
	}
	if d, f := rp.p50("distlock-file"), rp.p50("flock"); d > 0 && f > 0 {
		p := fmt.Sprintf("filelock p50 %s = %sx %s (%s)", fmtDur(d), sig3(float64(d)/float64(f)), rp.name("flock"), fmtDur(f))
		if t := rp.p50("flock-token"); t > 0 {
			p += fmt.Sprintf(", %sx %s (%s)", sig3(float64(d)/float64(t)), rp.name("flock-token"), fmtDur(t))
		}
		parts = append(parts, p)
	}
	g.Measured = strings.Join(parts, "; ")
	return g
}
