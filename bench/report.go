package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"time"
)

// Report writes results as Markdown.
type Report struct {
	Command  string // how the run was started
	Subjects []Subject
	Res      *Results
	Analysis string // hand-written findings, appended verbatim
	PlotDir  string // plots' directory relative to the report, "" if none
}

// Goal is one of the targets the run is judged against.
type Goal struct {
	N        int
	Text     string
	Measured string
	Met      bool
	Judged   bool // false when the run lacks what the goal needs
	Stated   bool // measured against a goal that sets no bound: neither met nor missed
}

func (rp *Report) subject(id string) (Subject, bool) {
	for _, s := range rp.Subjects {
		if s.ID == id {
			return s, true
		}
	}
	return Subject{}, false
}

func (rp *Report) name(id string) string {
	if s, ok := rp.subject(id); ok {
		return s.Name
	}
	return id
}

func (rp *Report) p50(id string) time.Duration {
	if lr := rp.Res.Latency[id]; lr != nil {
		return quantile(lr.Samples, 0.5)
	}
	return 0
}

// paired is the cycle-by-cycle ratio of subject a's uncontended cycle to
// b's (pairedRatio), "" when their turns do not pair (another service,
// or results without turns).
func (rp *Report) paired(a, b string) string {
	la, lb := rp.Res.Latency[a], rp.Res.Latency[b]
	sa, okA := rp.subject(a)
	sb, okB := rp.subject(b)
	if la == nil || lb == nil || !okA || !okB || sa.Service != sb.Service {
		return ""
	}
	q1, med, q3, ok := pairedRatio(la.Turns, lb.Turns)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%sx (%s–%s)", sig3(med), sig3(q1), sig3(q3))
}

// rtt is the median single round trip of a service, from the latency run.
func (rp *Report) rtt(service string) (time.Duration, string) {
	for _, s := range rp.Subjects {
		if s.Service == service && s.Kind == KindRoundTrip {
			if d := rp.p50(s.ID); d > 0 {
				return d, s.Name
			}
		}
	}
	return 0, ""
}

// idleRTT is the median round trip of a service after Hold of idleness,
// from the contention runs.
func (rp *Report) idleRTT(service string) time.Duration {
	if service == SvcRedlock {
		service = SvcRedis
	}
	for _, s := range rp.Subjects {
		if s.Service == service && s.Kind == KindRoundTrip {
			if d := rp.Res.IdleRTT[s.ID]; len(d) > 0 {
				return quantile(d, 0.5)
			}
		}
	}
	return 0
}

func (rp *Report) rate(id string) float64 {
	if tr := rp.Res.Throughput[id]; tr != nil && tr.Elapsed > 0 {
		return float64(tr.Cycles) / tr.Elapsed.Seconds()
	}
	return 0
}

// bySvc returns the built subjects of service with measure m and kinds.
func (rp *Report) bySvc(service string, m Measure, kinds ...Kind) []Subject {
	var out []Subject
	for _, s := range rp.Subjects {
		if s.Service == service && s.Has(m) && containsKind(kinds, s.Kind) {
			out = append(out, s)
		}
	}
	return out
}

func containsKind(ks []Kind, k Kind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func (rp *Report) services() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range rp.Subjects {
		if !seen[s.Service] {
			seen[s.Service] = true
			out = append(out, s.Service)
		}
	}
	return out
}

func (rp *Report) waste(id string, n int) (time.Duration, bool) {
	cr := rp.Res.Contention[n][id]
	if cr == nil || cr.Handoffs == 0 {
		return 0, false
	}
	return cr.Waste(), true
}

// Goals judges the run against its goals, numbered in order.
func (rp *Report) Goals() []Goal {
	var goals []Goal

	// 1. Latency.
	g := Goal{N: 1, Text: "distlock Redis (Client.Acquire) p50 within 1.10x of the floor and no slower than the fastest peer, while issuing a fencing token"}
	d, floor := rp.p50("distlock-redis"), rp.p50("floor")
	bestPeer, bestName := time.Duration(0), ""
	for _, s := range rp.bySvc(SvcRedis, Latency, KindPeer) {
		if p := rp.p50(s.ID); p > 0 && (bestPeer == 0 || p < bestPeer) {
			bestPeer, bestName = p, s.Name
		}
	}
	if d > 0 && floor > 0 && bestPeer > 0 {
		g.Judged = true
		g.Met = float64(d) <= 1.10*float64(floor) && d <= bestPeer
		g.Measured = fmt.Sprintf("p50 %s = %sx the floor (%s), %sx the fastest peer (%s, %s)",
			fmtDur(d), sig3(float64(d)/float64(floor)), fmtDur(floor), sig3(float64(d)/float64(bestPeer)), bestName, fmtDur(bestPeer))
		if t := rp.p50("distlock-redis-try"); t > 0 {
			g.Measured += fmt.Sprintf("; TryAcquire: %s = %sx the floor", fmtDur(t), sig3(float64(t)/float64(floor)))
		}
	}
	goals = append(goals, g)

	// 2. Throughput, per service with a distlock backend.
	g = Goal{N: 2, Text: "throughput (64 goroutines, distinct keys) at least the fastest peer's"}
	var parts []string
	g.Met = true
	for _, svc := range rp.services() {
		best, bestName := 0.0, ""
		for _, s := range rp.bySvc(svc, Throughput, KindPeer) {
			if r := rp.rate(s.ID); r > best {
				best, bestName = r, s.Name
			}
		}
		if best == 0 {
			continue
		}
		for _, s := range rp.bySvc(svc, Throughput, KindDistlock) {
			r := rp.rate(s.ID)
			if r == 0 {
				continue
			}
			g.Judged = true
			ok := r >= best
			g.Met = g.Met && ok
			parts = append(parts, fmt.Sprintf("%s %s/s vs %s %s/s (%sx)%s", s.Name, fmtRate(r), bestName, fmtRate(best), sig3(r/best), missed(ok)))
		}
	}
	g.Measured = strings.Join(parts, "; ")
	goals = append(goals, g)

	// 3. Hand-off waste, at the smallest contention level measured.
	g = Goal{N: 3, Text: "hand-off waste under 3 round trips on every backend, and at least 10x less than polling peers at their defaults"}
	parts = nil
	g.Met = true
	if n := rp.firstWaiters(); n > 0 {
		for _, svc := range rp.services() {
			rtt := rp.idleRTT(svc)
			for _, s := range rp.bySvc(svc, Contention, KindDistlock) {
				w, ok := rp.waste(s.ID, n)
				if !ok || rtt == 0 {
					continue
				}
				g.Judged = true
				inRTT := float64(w) / float64(rtt)
				ok = inRTT < 3
				g.Met = g.Met && ok
				cr := rp.Res.Contention[n][s.ID]
				p := fmt.Sprintf("%s %s = %s idle RTTs (%s)%s [per grant: %s = %s RTTs, %d hand-offs in %d grants]", s.Name, fmtDur(w), sig3(inRTT), fmtDur(rtt), missed(ok),
					fmtDur(cr.WastePerGrant()), sig3(float64(cr.WastePerGrant())/float64(rtt)), cr.Handoffs, cr.Grants)
				for _, peer := range rp.bySvc(svc, Contention, KindPeer) {
					if !peer.Polls {
						continue
					}
					if pw, ok := rp.waste(peer.ID, n); ok {
						ratio := float64(pw) / float64(w)
						ok := ratio >= 10
						g.Met = g.Met && ok
						p += fmt.Sprintf(", %sx less than %s%s", sig3(ratio), peer.Name, missed(ok))
					}
				}
				parts = append(parts, p)
			}
		}
		g.Text += fmt.Sprintf(" (%d waiters; judged per hand-off, waste per grant in brackets)", n)
	}
	g.Measured = strings.Join(parts, "; ")
	goals = append(goals, g)

	// 4. Goroutines O(1) in held locks. (The former goal on commands per
	// hand-off in fair mode is the no-herd goal of perfGoals now: fair mode
	// became the default.)
	g = Goal{N: 4, Text: "renewals batched: goroutines O(1) in the number of held locks"}
	parts = nil
	g.Met = true
	for _, s := range rp.Subjects {
		hs := rp.Res.Held[s.ID]
		if len(hs) < 2 {
			continue
		}
		lo, hi := hs[0], hs[len(hs)-1]
		g.Judged = true
		ok := hi.Goroutines-lo.Goroutines <= 2 && hi.SingleCalls == 0
		g.Met = g.Met && ok
		parts = append(parts, fmt.Sprintf("%s: %d goroutines with %s locks, %d with %s; %s renewal calls/s for %s leases/s%s",
			s.Name, lo.Goroutines, fmtRate(float64(lo.Locks)), hi.Goroutines, fmtRate(float64(hi.Locks)),
			sig3(float64(hi.BatchCalls+hi.SingleCalls)/hi.Window.Seconds()), fmtRate(float64(hi.Renewed)/hi.Window.Seconds()), missed(ok)))
	}
	g.Measured = strings.Join(parts, "; ")
	goals = append(goals, g)
	goals = numbered(goals, rp.zkGoals()...)
	goals = numbered(goals, rp.pgGoals()...)
	goals = numbered(goals, rp.perfGoals()...)
	goals = numbered(goals, rp.redlockGoals()...)
	// Goals added later come last, so that the numbers above stay.
	goals = numbered(goals, rp.pgMoreGoals()...)
	goals = numbered(goals, rp.rowsGoal())
	return goals
}

func missed(ok bool) string {
	if ok {
		return ""
	}
	return " (missed)"
}

// breakdownRequests lists the requests per unit by name: Redis commands
// as clients sent them; for etcd, gRPC methods.
func breakdownRequests(d Snapshot, units int) string {
	if len(d.RequestsByName) > 0 {
		return breakdown(d.RequestsByName, units, 8)
	}
	return breakdown(d.ByName, units, 8)
}

func (rp *Report) firstWaiters() int {
	if len(rp.Res.Params.ContentionWaiters) == 0 {
		return 0
	}
	return rp.Res.Params.ContentionWaiters[0]
}

func (rp *Report) lastWaiters() int {
	w := rp.Res.Params.ContentionWaiters
	if len(w) == 0 {
		return 0
	}
	return w[len(w)-1]
}

// Write writes the report.
func (rp *Report) Write(w io.Writer) error {
	b := &strings.Builder{}
	res, p := rp.Res, rp.Res.Params
	pf := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }

	pf("# distlock against its peers\n\n")
	pf("Generated by `%s` on %s (the run took %s).\n\n", rp.Command, res.Started.UTC().Format("2006-01-02 15:04 MST"), res.Elapsed.Round(time.Second))
	pf("Machine: %s, %d cores (GOMAXPROCS %d), %s/%s, %s. ", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	var vs []string
	for _, k := range []string{"Redis", "etcd", "ZooKeeper", "PostgreSQL"} {
		if v := res.Versions[k]; v != "" {
			vs = append(vs, k+" "+v)
		}
	}
	pf("Servers: %s, each a local process on 127.0.0.1 started by testserver (Redis without persistence; etcd one member, fsync on every write, data on the local disk; ZooKeeper standalone, its transaction log fsynced before each write is answered; PostgreSQL with fsync off). ", strings.Join(vs, ", "))
	pf("Clients, servers and the benchmark share the machine's cores, so the figures that matter are the ratios between rows of one run, not the absolute times.\n\n")
	pf("Method: the subjects of a measurement take turns (cycle by cycle within a service for latency, each turn in an order drawn at random; in %d rounds in a rotating order for throughput and %d for contention), so that noise on the machine (other work runs on it) falls on all of them alike. ", p.Rounds, p.ContentionRounds)
	pf("Each subject has its own keys. \"Requests\" are what clients sent (Redis: commands counted by a go-redis hook, plus SUBSCRIBE/UNSUBSCRIBE from INFO commandstats; a script call is one request; etcd: gRPC messages received, from /metrics `grpc_server_msg_received_total`, which counts unary requests and stream messages such as watch creations and lease keep-alives; ZooKeeper: packets received, from mntr `zk_packets_received`, session pings included; PostgreSQL: statements sent, counted by a pgx tracer). ")
	pf("\"Server ops\" are what the server executed (Redis: every command in INFO commandstats, those run inside scripts included; etcd: `etcd_mvcc_{range,put,delete,txn}_total`; ZooKeeper: requests finished, mntr `zk_cnt_updatelatency` (writes) and `zk_cnt_readlatency` (reads and pings); PostgreSQL: not read, 0).\n\n")

	pf("## Goals\n\n| # | goal | measured | verdict |\n|---|---|---|---|\n")
	for _, g := range rp.Goals() {
		verdict := "not judged (missing data)"
		switch {
		case g.Stated:
			verdict = "stated (no bound set)"
		case g.Judged:
			verdict = "**met**"
			if !g.Met {
				verdict = "**missed** (see Findings)"
			}
		}
		pf("| %d | %s | %s | %s |\n", g.N, g.Text, g.Measured, verdict)
	}
	pf("\n")

	rp.writeLatency(pf)
	rp.writeThroughput(pf)
	for i, n := range p.ContentionWaiters {
		rp.writeContention(pf, n, i+3)
	}
	rp.writeHeld(pf)
	rp.writeElection(pf, 4+len(p.ContentionWaiters))
	rp.writeSemaphores(pf, 5+len(p.ContentionWaiters))
	rp.writeCLI(pf, 6+len(p.ContentionWaiters))
	rp.writeSubjects(pf)

	if rp.Analysis != "" {
		pf("%s\n", strings.TrimSpace(rp.Analysis))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (rp *Report) writeLatency(pf func(string, ...any)) {
	p := rp.Res.Params
	pf("## 1. Uncontended acquire + release\n\n")
	pf("One goroutine, one key, %d timed cycles per subject, the subjects of a service taking turns cycle by cycle, each turn in an order drawn at random (seeded), so that no subject always comes right after the same one and pays for what it leaves behind (%d rounds; services one after the other within a round, so that a server is never left idle between two measured cycles: on this virtual machine a request sent after a millisecond of idleness costs several times one sent back to back, see section 3). A cycle is a blocking acquire and a release, through the library's public API (distlock: `Client.Acquire` and `Lock.Release`). Requests are counted over %d further cycles per subject, apart from the timed ones. p10 is the fast end of a subject's cycles; the comparisons below give, beside the ratio of the p50s, the median and quartiles of the ratios of two subjects' cycles taken in the same turn.\n\n", p.Rounds*p.LatencyOps, p.Rounds, p.LatencyCountOps)
	pf("| service | subject | p10 | p50 | p99 | mean | requests/cycle | server ops/cycle | Redis server time/cycle | requests by name, per cycle |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rp.Subjects {
		lr := rp.Res.Latency[s.ID]
		if s.NotBuilt != "" && s.Measures == 0 {
			pf("| %s | %s | not built yet | | | | | | | %s |\n", s.Service, s.Name, s.NotBuilt)
			continue
		}
		if lr == nil {
			continue
		}
		n := lr.Counted
		srv := ""
		if lr.Delta.ServerMicros > 0 && n > 0 {
			srv = fmtDur(time.Duration(lr.Delta.ServerMicros) * time.Microsecond / time.Duration(n))
		}
		pf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Service, s.Name,
			fmtDur(quantile(lr.Samples, 0.1)), fmtDur(quantile(lr.Samples, 0.5)), fmtDur(quantile(lr.Samples, 0.99)), fmtDur(mean(lr.Samples)),
			perUnit(lr.Delta.Requests, n), perUnit(lr.Delta.Ops, n), srv, breakdownRequests(lr.Delta, n))
	}
	pf("\n")
	rp.writeComparisons(pf, Latency, "p50 latency", func(id string) float64 { return float64(rp.p50(id)) }, fmtDurF, true)
	if rp.PlotDir != "" {
		pf("Latency distributions: [Redis](%[1]s/latency-redis.png), [etcd](%[1]s/latency-etcd.png), [ZooKeeper](%[1]s/latency-zookeeper.png), [PostgreSQL](%[1]s/latency-postgresql.png).\n\n", rp.PlotDir)
	}
}

func fmtDurF(v float64) string { return fmtDur(time.Duration(v)) }

func fmtRateF(v float64) string { return fmtRate(v) + "/s" }

// writeComparisons writes, per service, each distlock subject against each
// other subject (peers and floors), and the rows not built yet.
func (rp *Report) writeComparisons(pf func(string, ...any), m Measure, metric string, value func(id string) float64, format func(float64) string, lower bool) {
	// The uncontended cycles pair up turn by turn (see pairedRatio): their
	// ratio cycle by cycle goes beside the ratio of the p50s.
	pairs := m == Latency
	extra, extraSep := "", ""
	if pairs {
		extra, extraSep = " distlock/other cycle by cycle, median (quartiles) |", "---|"
	}
	pf("| service | distlock | against | %s: distlock | other | distlock/other |%s ahead |\n|---|---|---|---|---|---|%s---|\n", metric, extra, extraSep)
	cell := func(d, o string) string {
		if !pairs {
			return ""
		}
		return " " + rp.paired(d, o) + " |"
	}
	empty := ""
	if pairs {
		empty = " |"
	}
	for _, svc := range rp.services() {
		var ds []Subject
		for _, s := range rp.Subjects {
			if s.Service == svc && s.Kind == KindDistlock && (s.Has(m) || s.NotBuilt != "") {
				ds = append(ds, s)
			}
		}
		others := rp.bySvc(svc, m, KindPeer, KindFloor)
		var notBuiltOthers []Subject
		for _, s := range rp.Subjects {
			if s.Service == svc && s.Kind != KindDistlock && s.NotBuilt != "" {
				notBuiltOthers = append(notBuiltOthers, s)
			}
		}
		for _, d := range ds {
			for _, o := range others {
				if d.NotBuilt != "" {
					pf("| %s | %s | %s | not built yet | %s | |%s |\n", svc, d.Name, o.Name, format(value(o.ID)), empty)
					continue
				}
				dv, ov := value(d.ID), value(o.ID)
				if dv == 0 || ov == 0 {
					continue
				}
				pf("| %s | %s | %s | %s | %s | %s |%s %s |\n", svc, d.Name, o.Name, format(dv), format(ov), sig3(dv/ov), cell(d.ID, o.ID), versus(dv, ov, lower))
			}
			for _, o := range notBuiltOthers {
				pf("| %s | %s | %s | not built yet | not built yet | |%s |\n", svc, d.Name, o.Name, empty)
			}
		}
	}
	pf("\n")
}

func (rp *Report) writeThroughput(pf func(string, ...any)) {
	p := rp.Res.Params
	pf("## 2. Throughput, distinct keys\n\n")
	pf("%d goroutines of one instance (one process, one client), each locking and releasing a key of its own, for %s per subject and round.\n\n", p.ThroughputWorkers, p.ThroughputTime)
	pf("| service | subject | cycles/s | per round, min – max |\n|---|---|---|---|\n")
	for _, s := range rp.Subjects {
		tr := rp.Res.Throughput[s.ID]
		if s.NotBuilt != "" && s.Measures == 0 {
			pf("| %s | %s | not built yet | |\n", s.Service, s.Name)
			continue
		}
		if tr == nil {
			continue
		}
		lo, hi := minMax(tr.PerRound)
		pf("| %s | %s | %s | %s – %s |\n", s.Service, s.Name, fmtRate(rp.rate(s.ID)), fmtRate(lo), fmtRate(hi))
	}
	pf("\n")
	rp.writeComparisons(pf, Throughput, "cycles/s", rp.rate, fmtRateF, false)
}

func minMax(v []float64) (lo, hi float64) {
	if len(v) == 0 {
		return 0, 0
	}
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

func (rp *Report) writeContention(pf func(string, ...any), n, section int) {
	p := rp.Res.Params
	title := "Hand-off under contention"
	if n == rp.lastWaiters() && n != rp.firstWaiters() {
		title = "Herd"
	}
	pf("## %d. %s: %d waiters on one key\n\n", section, title, n)
	pf("%d goroutines, each with an instance of its own (its own clients and connections, as %d processes would), compete for one key until each has been granted it %d times; each holds it for %s, then releases it and asks again at once. %d rounds. ",
		n, n, max(1, p.ContentionGrants/n), p.Hold, p.ContentionRounds)
	pf("Before the timing and the counters start, each goroutine has locked and released a key of its own twice in a row (as the run asks again at once) and then waited for this key once while another instance held it, so that connections, sessions and subscriptions (made once per process) are not counted per hand-off. ")
	pf("Each round starts with every goroutine asking while a further instance holds the key; it releases the key %d holds after the last has asked, so that the first pass goes in the order the requests reached the service, as the later ones do, and not in the order in which the goroutines happened to start (that release is the first hand-off; its grant is not counted). ", gateSettle)
	pf("A hand-off is a grant to another waiter than the previous holder; a grant straight back to the goroutine that just released is not one. ")
	pf("Waste per hand-off is (total time - time held) / hand-offs: the idle time a waiter's turn costs (the formula of goal 3, with hand-offs counted that way); waste per grant divides by every grant instead. ")
	pf("RTTs: the waste divided by the service's median round trip measured in the same run after %s of idleness, as a hand-off meets it (%s for Redis, %s for etcd; back to back the round trips are %s and %s, section 1). ",
		p.Hold, fmtDur(rp.idleRTT(SvcRedis)), fmtDur(rp.idleRTT(SvcEtcd)), fmtDurF(float64(rp.p50("redis-ping"))), fmtDurF(float64(rp.p50("etcd-get"))))
	pf("Gaps are the times from a release call to the next grant to another waiter. Fairness is max/min grants per waiter at the moment the first waiter had its share (worst round); a waiter with no grant by then makes it infinite. Overtakes (all rounds) count the times a waiter was passed by one that surely asked after it (whose previous grant came after this one asked): none in a first-in, first-out queue. ")
	pf("Requests per hand-off are all the requests of the runs divided by their hand-offs. No two holders overlapped unless the violations column says so.\n\n")
	pf("| service | subject | grants | hand-offs | waste/hand-off | in idle RTTs | waste/grant | gap p50 | gap p99 | gap max | fairness | requests/hand-off | server ops/hand-off | requests by name, per hand-off | violations |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rp.Subjects {
		if s.NotBuilt != "" && s.Measures == 0 {
			pf("| %s | %s | not built yet | | | | | | | | | | | | |\n", s.Service, s.Name)
			continue
		}
		cr := rp.Res.Contention[n][s.ID]
		if cr == nil {
			continue
		}
		w := cr.Waste()
		inRTT := "n/a"
		if rtt := rp.idleRTT(s.Service); rtt > 0 && cr.Handoffs > 0 {
			inRTT = sig3(float64(w) / float64(rtt))
		}
		viol := fmt.Sprint(cr.Violations)
		if cr.Incomplete > 0 {
			viol += fmt.Sprintf("; %d rounds stopped after %s", cr.Incomplete, p.ContentionLimit)
		}
		if len(cr.Errors) > 0 {
			viol += "; errors: " + strings.Join(cr.Errors, "; ")
		}
		var maxGap time.Duration
		if len(cr.HandoffGap) > 0 {
			maxGap = cr.HandoffGap[len(cr.HandoffGap)-1]
		}
		pf("| %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Service, s.Name, cr.Grants, cr.Handoffs,
			fmtDur(w), inRTT, fmtDur(cr.WastePerGrant()), fmtDur(quantile(cr.HandoffGap, 0.5)), fmtDur(quantile(cr.HandoffGap, 0.99)), fmtDur(maxGap),
			fmtFairness(cr.Fairness, cr.Starved)+fmt.Sprintf(" (%d overtakes)", cr.Overtakes),
			perUnit(cr.Delta.Requests, cr.Handoffs), perUnit(cr.Delta.Ops, cr.Handoffs), breakdownRequests(cr.Delta, cr.Handoffs), viol)
	}
	pf("\n")
	rp.writeComparisons(pf, Contention, "waste/hand-off", func(id string) float64 {
		w, _ := rp.waste(id, n)
		return float64(w)
	}, fmtDurF, true)
	rp.writeComparisons(pf, Contention, "requests/hand-off", func(id string) float64 {
		if cr := rp.Res.Contention[n][id]; cr != nil && cr.Handoffs > 0 {
			return float64(cr.Delta.Requests) / float64(cr.Handoffs)
		}
		return 0
	}, func(v float64) string { return fmt.Sprintf("%.2f", v) }, true)
	if rp.PlotDir != "" {
		pf("Distribution of the hand-off gaps: [plot](%s/handoff-%d.png).\n\n", rp.PlotDir, n)
	}
}

func (rp *Report) writeHeld(pf func(string, ...any)) {
	p := rp.Res.Params
	pf("## %d. Held locks\n\n", 3+len(p.ContentionWaiters))
	pf("One Client (distlock.WithTTL(%s), so renewal every %s) acquires the locks (16 at a time) and keeps them; renewals are counted over %s. Goroutines are those running distlock code or started by it (the Client's watchdog and renewal batches, the backend package's own, such as redislock's pub/sub dispatcher), counted from the process's stacks while all locks are held; the service client library's goroutines (go-redis, the etcd client's streams: one set per backend) are not counted. Heap is this process's live heap, compared with before the Client existed.\n\n", p.HeldTTL, p.HeldTTL/3, p.HeldWindow)
	pf("| backend | locks | goroutines | heap/lock | leases renewed/s | renewal calls/s (batched) | requests/s | server ops/s | lost | time to acquire all |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rp.Subjects {
		for _, h := range rp.Res.Held[s.ID] {
			sec := h.Window.Seconds()
			pf("| %s | %s | %d | %s B | %s | %s (%s) | %s | %s | %d | %s |\n", s.Name, fmtRate(float64(h.Locks)), h.Goroutines,
				fmtRate(h.HeapPerLock), fmtRate(float64(h.Renewed)/sec), sig3(float64(h.BatchCalls+h.SingleCalls)/sec),
				sig3(float64(h.BatchCalls)/sec), fmtRate(h.RequestsPerS), fmtRate(float64(h.Delta.Ops)/sec), h.Lost, h.AcquireTime.Round(time.Millisecond))
		}
	}
	pf("\n")
}

func (rp *Report) writeSubjects(pf func(string, ...any)) {
	pf("## Subjects and their settings\n\n| service | subject | settings |\n|---|---|---|\n")
	for _, s := range rp.Subjects {
		set := s.Settings
		if s.NotBuilt != "" {
			set = "**not built yet**: " + s.NotBuilt
		}
		pf("| %s | %s | %s |\n", s.Service, s.Name, set)
	}
	pf("\n")
}

// cpuModel returns the CPU model name from /proc/cpuinfo, if any.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
