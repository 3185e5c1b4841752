package torture_test

import (
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/torture"
)

var (
	nemesisSeed     = flag.Uint64("nemesis.seed", 0, "the nemesis schedule's seed (default: a random one, printed)")
	nemesisDuration = flag.Duration("nemesis.duration", 0, "run the nemesis mode for this long per backend (its store modes at once), and write its table to -nemesis.out (default: the short mix)")
	nemesisBackends = flag.String("nemesis.backends", "redis,etcd,file", "the backends of the nemesis mode, comma-separated (redis, etcd, file, zookeeper, redlock, redlock-empty, postgres, postgres-lease, gateway)")
	nemesisOut      = flag.String("nemesis.out", "NEMESIS.md", "where the full nemesis mode writes its table")
	nemesisSaveDir  = flag.String("nemesis.histories", os.TempDir(), "where a nemesis run that a checker fails saves its history (judge it again with -nemesis.judge)")
	nemesisJudge    = flag.String("nemesis.judge", "", "TestNemesisJudgeHistory: judge again the history a failed nemesis run saved")
)

// nemesisShort is the schedule's length per backend (its store modes at
// once) in the short mix.
const nemesisShort = 6 * time.Second

// nemesisTTL is the workers' lock TTL: the faults' spans are drawn around
// it.
const nemesisTTL = time.Second

// TestNemesis runs a random schedule of overlapping faults, drawn from a
// seed, over the lock and election workload on each backend, with an
// unfenced and a fenced store, and judges every run (see
// NemesisResult.Judge): no proven overlap, no token regression, and with
// the fence no stale write accepted and a linearizable register. The
// unfenced baseline is reported, never required to bite: whether a random
// schedule bites depends on timing. -nemesis.seed N replays a schedule.
func TestNemesis(t *testing.T) {
	seed := *nemesisSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	d := nemesisShort
	if *nemesisDuration > 0 {
		d = *nemesisDuration
	}
	replay := fmt.Sprintf("go test . -run 'TestNemesis' -args -nemesis.seed %d", seed)
	if *nemesisDuration > 0 {
		replay = fmt.Sprintf("go test . -run 'TestNemesis' -timeout 0 -args -nemesis.seed %d -nemesis.duration %v", seed, d)
	}
	if b := flag.Lookup("nemesis.backends"); b.Value.String() != b.DefValue {
		replay += " -nemesis.backends " + b.Value.String()
	}
	t.Logf("nemesis seed %d (replay: %s)", seed, replay)
	var results []*torture.NemesisResult
	for _, kind := range strings.Split(*nemesisBackends, ",") {
		t.Run(kind, func(t *testing.T) {
			nt := startNemesisTarget(t, kind)
			plan := torture.NewNemesisPlan(seed, d, nt.Shape(nemesisTTL))
			t.Logf("seed %d on %s (%s): %d faults", seed, kind, nt.Deployment, len(plan.Events))
			// The store modes run at once, under the one schedule.
			modes := torture.Modes(nt.Kind)
			nrs := torture.RunNemesisModes(t, nt, modes, plan, nemesisTTL)
			results = append(results, nrs...)
			for i, mode := range modes {
				nr := nrs[i]
				t.Run(mode.String(), func(t *testing.T) {
					t.Logf("%d faults %v, %d grants, %d writes, stale %d/%d/%d, lost updates %d, verdicts %v",
						len(plan.Events), nr.Faults, nr.Grants, nr.Writes, nr.StaleAttempted, nr.StaleRefused, nr.StaleAccepted, nr.LostUpdates, nr.Verdicts)
					logCutoffs(t, nr)
					t.Logf("lock sets: %d granted, %d parts", nr.Sets, nr.SetGrants)
					if v := nr.Permits; v.Ran {
						t.Logf("permits: %d grants, at most %d of %d live, stale %d/%d/%d", v.Grants, v.MaxHolders, v.Limit, v.StaleAttempted, v.StaleRefused, v.StaleAccepted)
					}
					if v := nr.Units; v.Ran {
						t.Logf("units: %d grants, at most %d owner(s) of a unit, stale %d/%d/%d; members whose Run ended: %d",
							v.Grants, v.MaxHolders, v.StaleAttempted, v.StaleRefused, v.StaleAccepted, nr.MemberErrors)
					}
					bads := nr.Judge()
					for _, bad := range bads {
						t.Errorf("seed %d: %s (replay: %s)", seed, bad, replay)
					}
					if len(bads) > 0 {
						path := filepath.Join(*nemesisSaveDir, fmt.Sprintf("nemesis-%d-%s-%s.json", seed, kind, mode))
						if err := nr.WriteHistory(path); err != nil {
							t.Errorf("saving the history: %v", err)
						} else {
							t.Logf("history saved: judge it again with go test . -run TestNemesisJudgeHistory -args -nemesis.judge %s", path)
						}
					}
					// The recipes' workloads ran: a permit granted, a unit
					// owned (a judge of nothing holds vacuously).
					if nr.Permits.Ran && nr.Permits.Grants == 0 {
						t.Errorf("seed %d: no permit granted in the run (replay: %s)", seed, replay)
					}
					if nr.Units.Ran && nr.Units.Grants == 0 {
						t.Errorf("seed %d: no unit granted in the run (replay: %s)", seed, replay)
					}
					if nr.Sets == 0 {
						t.Errorf("seed %d: no lock set granted in the run (replay: %s)", seed, replay)
					}
					if t.Failed() {
						for _, n := range nr.Notes {
							t.Log("  " + n)
						}
					}
				})
			}
		})
	}
	table := torture.NemesisTable(results)
	t.Logf("\n%s", table)
	if *nemesisDuration > 0 && !t.Failed() {
		out := fmt.Sprintf("# Nemesis\n\nSeed %d, %v per backend, its store modes at once under the one schedule (`%s`).\n\n%s", seed, d, replay, table)
		if err := os.WriteFile(*nemesisOut, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startNemesisTarget starts the deployment kind promises to survive.
func startNemesisTarget(t *testing.T, kind string) torture.NemesisTarget {
	switch kind {
	case "redis":
		srv := testserver.StartRedis(t, testserver.WithRedisAppendOnly(), testserver.WithRedisMovableClock())
		return torture.NemesisTarget{Target: torture.Target{Kind: kind, Redis: srv}, Servers: []*testserver.Process{srv.Process},
			Clocks: []*testserver.MovableClock{srv.Clock}, Deployment: "one Redis, appendfsync always"}
	case "etcd":
		// No clock jumps: etcd is a Go binary, which the preloaded clock
		// shim does not reach, and it times leases with the leader's
		// monotonic clock.
		// Each member advertises a proxy to its peers, which tells the
		// connections into it apart by the member that dialed them: a
		// cut of a member blackholes its proxy, and its connections
		// through the others'; a cut of the link between two members
		// blackholes, in each one's proxy, the connections the other
		// dialed. The proxies of a start attempt that failed are replaced
		// by the next attempt's.
		proxies := make([]*faultproxy.Proxy, 3)
		e := testserver.StartEtcdCluster(t, 3, testserver.WithEtcdPeerAddress(func(member int, addr string) (string, error) {
			p, err := faultproxy.New(addr)
			if err != nil {
				return "", err
			}
			t.Cleanup(p.Close)
			proxies[member] = p
			return p.Addr(), nil
		}))
		nt := torture.NemesisTarget{Target: torture.Target{Kind: kind, Etcd: e}, Deployment: "3-member etcd"}
		for _, m := range e.Members {
			nt.Servers = append(nt.Servers, m.Process)
		}
		procs := slices.Clone(nt.Servers)
		for i, m := range e.Members {
			if runtime.GOOS != "linux" {
				break // DialedBy reads /proc: no cuts of a member's links elsewhere
			}
			proxies[i].SetOrigin(func(c net.Conn) string {
				if j := testserver.DialedBy(c, procs...); j >= 0 {
					return e.Members[j].Name
				}
				return ""
			})
			nt.PeerCuts = append(nt.PeerCuts, func(cut bool) {
				for j, p := range proxies {
					switch {
					case j == i && cut:
						p.Blackhole()
					case j == i:
						p.Heal()
					case cut:
						p.BlackholeFrom(m.Name)
					default:
						p.HealFrom(m.Name)
					}
				}
			})
		}
		if runtime.GOOS == "linux" {
			nt.LinkCuts = func(a, b int, cut bool) {
				for _, l := range [][2]int{{a, b}, {b, a}} {
					if into, from := proxies[l[0]], e.Members[l[1]].Name; cut {
						into.BlackholeFrom(from)
					} else {
						into.HealFrom(from)
					}
				}
			}
		}
		return nt
	case "zookeeper":
		nt, _ := zkNemesisTarget(t)
		return nt
	case "redlock":
		// No clock jumps: one node's forward step frees a grant only
		// where the grant stood on a bare majority that includes the
		// node (Redlock's clock assumption, see redlock's doc and the
		// clock-jump row), and the history does not say which nodes a
		// grant stood on, so an overlap after a step could not be told
		// from a defect.
		return redlockNemesisTarget(torture.RedlockTarget(t, testserver.WithRedisAppendOnly()), "appendfsync always")
	case "redlock-empty":
		// Kills without fsync: nodes without persistence restart empty,
		// which Redlock's seed marker handles (a node that lost its data
		// votes again only once every grant it forgot has expired, and
		// hands out no token below what a majority had: see redlock's
		// Durability). The schedule kills one node at a time, and does
		// not wait for the last restarted node to be copied: only its
		// shortest spans and gaps (1.4s from a restart to the restart
		// of the node after next) could leave three of the five nodes
		// without their counters at once, which stops grants for the
		// rest of the run (availability, which is not judged: the note
		// of failed acquisitions would show it). A longest TTL of 2s
		// (max_ttl, the nemesis TTL being 1s) bounds a restarted node's
		// wait to vote. No clock jumps, as above.
		tg := torture.RedlockTarget(t)
		tg.RedlockOptions = "max_ttl=2s"
		return redlockNemesisTarget(tg, "without persistence, max_ttl 2s: a killed node restarts empty")
	case "postgres-lease":
		// Lease mode: a lease row, committed with synchronous_commit on
		// (pglock asks for it), outlives a killed server and expires by
		// the server's clock (now(): the lock server's clock is movable,
		// for the clock jumps). (A session lock goes with its session: a
		// holder cut off from the server when it is killed learns of
		// the loss only from its own deadline, while the restarted
		// server may grant the lock at once; see the partition row.) The
		// fenced store's registers are on a server of their own, which
		// the schedule does not kill.
		lock := testserver.StartPostgres(t, testserver.WithPostgresSettings("fsync=on"), testserver.WithPostgresMovableClock())
		nt := torture.NemesisTarget{Target: torture.PGLeaseTarget(lock, testserver.StartPostgres(t)),
			Servers: []*testserver.Process{lock.Process}, Clocks: []*testserver.MovableClock{lock.Clock},
			Deployment: "PostgreSQL in lease mode, fsync=on"}
		return nt
	case "postgres":
		// Session mode: a grant is an advisory lock of the holder's
		// session. The server is paused, never killed: a killed server
		// takes every session's locks with it, and the restarted server
		// may grant a lock at once while its holder, cut off, learns of
		// the loss only at its own deadline (the server-kill rows of
		// REPORT.md); a paused one keeps its sessions and their locks.
		// The fenced store's registers are on a server of their own.
		lock := testserver.StartPostgres(t)
		return torture.NemesisTarget{Target: torture.Target{Kind: kind, PG: lock, Data: testserver.StartPostgres(t)},
			Servers: []*testserver.Process{lock.Process}, NoServerKill: true, Deployment: "PostgreSQL in session mode, paused, not killed"}
	case "gateway":
		// No gateway kills or pauses (no server faults): over a backend
		// that frees a dead gateway's locks at once, a holder cut off
		// from the gateway when it dies learns of the loss only when its
		// keepalive times out (see the gateway-kill row), which is not a
		// fault the gateway survives.
		return torture.NemesisTarget{Target: torture.GatewayTarget(torture.StartGateway(t)), Deployment: "the gateway over a local lock directory, neither killed nor paused"}
	case "file":
		return torture.NemesisTarget{Target: torture.Target{Kind: kind, Dir: t.TempDir()}, Deployment: "local lock directory"}
	}
	t.Fatalf("nemesis: unknown backend %q", kind)
	return torture.NemesisTarget{}
}

// leaderStall is the stall of a ZooKeeper target's LeaderStalls under way:
// the follower's index (-1: none) and the proxies of its quorum link to
// its leader.
type leaderStall struct {
	f     int
	links []*faultproxy.Proxy
}

// zkNemesisTarget is startNemesisTarget's ZooKeeper target, with the
// stall its LeaderStalls keeps.
func zkNemesisTarget(t *testing.T) (torture.NemesisTarget, *leaderStall) {
	st := &leaderStall{f: -1}
	// No clock jumps: ZooKeeper expires sessions by the servers'
	// monotonic clock. The members reach each other through proxies,
	// one per link and port, for the cuts of a server from its peers
	// and of the links between two
	// (see NemesisServerPeerCut for the links a cut misses). The
	// proxies of a start attempt that failed stay in peers, linked to
	// ports nothing listens on: cutting them cuts nothing.
	// syncLimit 2 (× tickTime 200ms, plus half a tick, within a
	// quarter of the workers' 2s sessions) is the deployment in which
	// zklock's confirmation holds through a follower whose leader's
	// messages stall while its own flow (server-leader-stall).
	peers := map[int][]*faultproxy.Proxy{}    // by member ID, every link from or to it
	pairs := map[[2]int][]*faultproxy.Proxy{} // by the two member IDs, lower first
	type quorumLink struct {
		from, to int
		addr     string
		p        *faultproxy.Proxy
	}
	var links []quorumLink
	zk := testserver.StartZooKeeperEnsemble(t, 3, testserver.WithSyncLimit(2), testserver.WithPeerAddress(func(from, to int, addr string) (string, error) {
		p, err := faultproxy.New(addr)
		if err != nil {
			return "", err
		}
		t.Cleanup(p.Close)
		peers[from] = append(peers[from], p)
		peers[to] = append(peers[to], p)
		pair := [2]int{min(from, to), max(from, to)}
		pairs[pair] = append(pairs[pair], p)
		links = append(links, quorumLink{from, to, addr, p})
		return p.Addr(), nil
	}))
	nt := torture.NemesisTarget{Target: torture.Target{Kind: "zookeeper", ZK: zk}, Deployment: "3-server ZooKeeper ensemble, syncLimit 2"}
	for _, m := range zk.Members {
		nt.Servers = append(nt.Servers, m.Process)
		links := peers[m.ID]
		if len(links) == 0 {
			nt.PeerCuts = append(nt.PeerCuts, nil) // no cuts: see NemesisTarget.kinds
			continue
		}
		nt.PeerCuts = append(nt.PeerCuts, func(cut bool) {
			for _, p := range links {
				if cut {
					p.Blackhole()
				} else {
					p.Heal()
				}
			}
		})
	}
	if len(links) > 0 {
		nt.LeaderStalls = func(target int, stall bool) (int, string) {
			if !stall {
				f := st.f
				for _, p := range st.links {
					p.Heal()
				}
				st.f, st.links = -1, nil
				if f < 0 {
					return -1, fmt.Sprintf("server %d: no leader stall to end", target)
				}
				return f, fmt.Sprintf("server %d's link from its leader flows again", f)
			}
			// The members are asked at once: a paused one answers
			// only at the four-letter word's timeout.
			modes := make([]string, len(zk.Members))
			var wg sync.WaitGroup
			for i, m := range zk.Members {
				wg.Go(func() { modes[i], _ = m.Mode() })
			}
			wg.Wait()
			leader := slices.Index(modes, "leader")
			if leader < 0 {
				return -1, fmt.Sprintf("server %d's link from its leader not stalled: no leader found (modes %q)", target, modes)
			}
			f := target
			if f == leader {
				f = (target + 1) % len(zk.Members)
			}
			for _, l := range links {
				if l.from == zk.Members[f].ID && l.to == zk.Members[leader].ID && l.addr == zk.Members[leader].QuorumAddr {
					l.p.StallReplies()
					st.links = append(st.links, l.p)
				}
			}
			st.f = f
			return f, fmt.Sprintf("server %d's link from its leader, server %d, stalled one way (%d proxy)", f, leader, len(st.links))
		}
	}
	if len(pairs) > 0 {
		nt.LinkCuts = func(a, b int, cut bool) {
			x, y := zk.Members[a].ID, zk.Members[b].ID
			for _, p := range pairs[[2]int{min(x, y), max(x, y)}] {
				if cut {
					p.Blackhole()
				} else {
					p.Heal()
				}
			}
		}
	}
	return nt, st
}

// redlockNemesisTarget is the nemesis target of tg's Redlock nodes,
// described as "N independent Redis, " and how.
func redlockNemesisTarget(tg torture.Target, how string) torture.NemesisTarget {
	nt := torture.NemesisTarget{Target: tg, Deployment: fmt.Sprintf("%d independent Redis, %s", len(tg.Redlock), how)}
	for _, n := range tg.Redlock {
		nt.Servers = append(nt.Servers, n.Process)
	}
	return nt
}

// TestNemesisPlanReplays checks that a seed draws the same schedule, that
// another seed draws another, and that faults of a plan overlap.
func TestNemesisPlanReplays(t *testing.T) {
	shape := torture.NemesisShape{Workers: 5, Servers: 3, Kinds: torture.NemesisKinds, TTL: time.Second}
	a := torture.NewNemesisPlan(42, time.Minute, shape)
	b := torture.NewNemesisPlan(42, time.Minute, shape)
	c := torture.NewNemesisPlan(43, time.Minute, shape)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("seed 42 drew two different schedules")
	}
	if reflect.DeepEqual(a.Events, c.Events) {
		t.Fatal("seeds 42 and 43 drew the same schedule")
	}
	kinds := map[string]bool{}
	overlaps := 0
	for i, e := range a.Events {
		kinds[e.Kind] = true
		if e.At+e.For > a.Duration {
			t.Errorf("event %s ends after the schedule's %v", e, a.Duration)
		}
		for _, f := range a.Events[i+1:] {
			if f.At < e.At+e.For {
				overlaps++
			}
		}
	}
	for _, k := range torture.NemesisKinds {
		if !kinds[k] {
			t.Errorf("a minute's schedule has no %s fault", k)
		}
	}
	if overlaps == 0 {
		t.Error("no two faults of a minute's schedule overlap")
	}
	// One server at a time: the server faults never overlap.
	var last time.Duration
	for _, e := range a.Events {
		if e.Kind == torture.NemesisServerPause || e.Kind == torture.NemesisServerKill {
			if e.At < last {
				t.Errorf("server fault %s starts before the previous one ended (%v)", e, last)
			}
			last = e.At + e.For
		}
	}
}

// logCutoffs logs the detection times of a run by fault kind.
func logCutoffs(t *testing.T, nr *torture.NemesisResult) {
	t.Helper()
	type times struct{ loss, grant []time.Duration }
	by := map[string]*times{}
	for _, c := range nr.Cutoffs {
		if by[c.Kind] == nil {
			by[c.Kind] = &times{}
		}
		if c.Loss >= 0 {
			by[c.Kind].loss = append(by[c.Kind].loss, c.Loss)
		}
		if c.Grant >= 0 {
			by[c.Kind].grant = append(by[c.Kind].grant, c.Grant)
		}
	}
	for _, k := range torture.NemesisKinds {
		if ts := by[k]; ts != nil {
			t.Logf("cut off by %s: loss reported after %v, next grant after %v", k, ts.loss, ts.grant)
		}
	}
	if nr.ClockOverlaps > 0 {
		t.Logf("%d of %d overlaps after a server's clock stepped forward", nr.ClockOverlaps, nr.Overlaps)
	}
}

// kindApart draws two minutes of seed's schedule for 5 workers and
// servers with every kind and without kind, checks that the other kinds'
// events are the same in both, and returns kind's events. The kinds
// that a kind puts off (link cuts and leader stalls for the peer cuts,
// leader stalls for the link cuts) are left out of the comparison.
func kindApart(t *testing.T, kind string, seed uint64, servers int) []torture.NemesisEvent {
	t.Helper()
	var old []string
	for _, k := range torture.NemesisKinds {
		if k != kind {
			old = append(old, k)
		}
	}
	shape := torture.NemesisShape{Workers: 5, Servers: servers, Kinds: old, TTL: time.Second}
	without := torture.NewNemesisPlan(seed, 2*time.Minute, shape)
	shape.Kinds = torture.NemesisKinds
	with := torture.NewNemesisPlan(seed, 2*time.Minute, shape)
	var others, evs []torture.NemesisEvent
	for _, e := range with.Events {
		if e.Kind == kind {
			evs = append(evs, e)
		} else {
			others = append(others, e)
		}
	}
	putOff := map[string][]string{
		torture.NemesisServerPeerCut: {torture.NemesisServerLinkCut, torture.NemesisServerLeaderStall},
		torture.NemesisServerLinkCut: {torture.NemesisServerLeaderStall},
	}[kind]
	later := func(e torture.NemesisEvent) bool { return slices.Contains(putOff, e.Kind) }
	others = slices.DeleteFunc(others, later)
	without.Events = slices.DeleteFunc(without.Events, later)
	if !reflect.DeepEqual(others, without.Events) {
		t.Fatalf("seed %d, %d servers: the other kinds' events differ with %s in the shape:\nwithout: %v\nwith:    %v", seed, servers, kind, without.Events, others)
	}
	return evs
}

// TestNemesisPlanClockJumpsApart checks that the clock jumps leave the
// rest of a seed's schedule alone: the events of the other kinds are the
// same whether or not the shape takes clock jumps, and the clock jumps
// move one server's clock at a time, each undone before the next,
// forward and back, by at least a TTL.
func TestNemesisPlanClockJumpsApart(t *testing.T) {
	for _, seed := range []uint64{1, 42, 1796480551781457007} {
		for _, servers := range []int{1, 3, 5} {
			jumps := kindApart(t, torture.NemesisServerClockJump, seed, servers)
			if len(jumps) == 0 {
				t.Fatalf("seed %d, %d servers: no clock jump in two minutes", seed, servers)
			}
			var last time.Duration
			forward, back := 0, 0
			for _, e := range jumps {
				if e.At < last {
					t.Errorf("seed %d: clock jump %s starts before the previous one ended (%v)", seed, e, last)
				}
				last = e.At + e.For
				if e.Target < 0 || e.Target >= servers {
					t.Errorf("seed %d: clock jump %s of a server out of range", seed, e)
				}
				if e.Jump.Abs() < time.Second {
					t.Errorf("seed %d: clock jump %s smaller than the TTL", seed, e)
				}
				if e.Jump > 0 {
					forward++
				} else {
					back++
				}
			}
			if forward == 0 || back == 0 {
				t.Errorf("seed %d: %d jumps forward and %d back in two minutes, want both", seed, forward, back)
			}
		}
	}
}

// TestNemesisPlanPeerCutsApart checks that the cuts of servers from
// their peers leave the rest of a seed's schedule alone, as the clock
// jumps do, and cut one server off at a time, each healed before the
// next.
func TestNemesisPlanPeerCutsApart(t *testing.T) {
	for _, seed := range []uint64{1, 42, 1796501929713515433} {
		const servers = 3
		cuts := kindApart(t, torture.NemesisServerPeerCut, seed, servers)
		if len(cuts) == 0 {
			t.Fatalf("seed %d: no peer cut in two minutes", seed)
		}
		var last time.Duration
		targets := map[int]bool{}
		for _, e := range cuts {
			if e.At < last {
				t.Errorf("seed %d: peer cut %s starts before the previous one ended (%v)", seed, e, last)
			}
			last = e.At + e.For
			if e.Target < 0 || e.Target >= servers {
				t.Errorf("seed %d: peer cut %s of a server out of range", seed, e)
			}
			targets[e.Target] = true
		}
		if len(targets) < 2 {
			t.Errorf("seed %d: peer cuts of %d server(s) only in two minutes: %v", seed, len(targets), cuts)
		}
	}
}

// TestNemesisPlanPutOffApart checks that the cuts of links between two
// servers and the stalls of a follower's link from its leader leave the
// rest of a seed's schedule alone, as the peer cuts do, come one at a
// time (a link cut between two distinct servers), each healed before the
// next, and never overlap the kinds that put them off: the peer cuts,
// and for the stalls the link cuts too.
func TestNemesisPlanPutOffApart(t *testing.T) {
	for _, tc := range []struct {
		kind string
		busy []string
	}{
		{torture.NemesisServerLinkCut, []string{torture.NemesisServerPeerCut}},
		{torture.NemesisServerLeaderStall, []string{torture.NemesisServerPeerCut, torture.NemesisServerLinkCut}},
	} {
		for _, seed := range []uint64{1, 42, 1796501929713515433} {
			const servers = 3
			evs := kindApart(t, tc.kind, seed, servers)
			if len(evs) == 0 {
				t.Fatalf("seed %d: no %s in two minutes", seed, tc.kind)
			}
			plan := torture.NewNemesisPlan(seed, 2*time.Minute, torture.NemesisShape{Workers: 5, Servers: servers, Kinds: torture.NemesisKinds, TTL: time.Second})
			var last time.Duration
			targets := map[[2]int]bool{}
			for _, e := range evs {
				if e.At < last {
					t.Errorf("seed %d: %s starts before the previous one ended (%v)", seed, e, last)
				}
				last = e.At + e.For
				link := tc.kind == torture.NemesisServerLinkCut
				if e.Target < 0 || e.Target >= servers || link && (e.Peer >= servers || e.Target >= e.Peer) {
					t.Errorf("seed %d: %s on a server out of range, or between a server and itself", seed, e)
				}
				targets[[2]int{e.Target, e.Peer}] = true
				for _, c := range plan.Events {
					if slices.Contains(tc.busy, c.Kind) && c.At < e.At+e.For && e.At < c.At+c.For {
						t.Errorf("seed %d: %s overlaps %s", seed, e, c)
					}
				}
			}
			if len(targets) < 2 {
				t.Errorf("seed %d: %s on %d server(s) or link(s) only in two minutes: %v", seed, tc.kind, len(targets), evs)
			}
		}
	}
}

// TestNemesisPlanKeepsChannels pins that the recipes' and the lock sets'
// workers (the shape's Extra, up to 8) leave a seed's faults for the other workers and the
// servers as they were: their channels are drawn after all others.
func TestNemesisPlanKeepsChannels(t *testing.T) {
	for _, servers := range []int{0, 1, 3} {
		for seed := uint64(1); seed <= 20; seed++ {
			shape := torture.NemesisShape{Workers: 5, Servers: servers, Kinds: torture.NemesisKinds, TTL: time.Second}
			old := torture.NewNemesisPlan(seed, time.Minute, shape)
			shape.Extra = 8
			grown := torture.NewNemesisPlan(seed, time.Minute, shape)
			var kept []torture.NemesisEvent
			extra := 0
			for _, e := range grown.Events {
				server := e.Kind == torture.NemesisServerPause || e.Kind == torture.NemesisServerKill || e.Kind == torture.NemesisServerClockJump ||
					e.Kind == torture.NemesisServerPeerCut || e.Kind == torture.NemesisServerLinkCut || e.Kind == torture.NemesisServerLeaderStall
				if server || e.Target < shape.Workers {
					kept = append(kept, e)
				} else {
					extra++
				}
			}
			if !reflect.DeepEqual(kept, old.Events) {
				t.Fatalf("seed %d, %d servers: the existing channels' events changed with 8 extra workers:\nwithout: %v\nwith:    %v", seed, servers, old.Events, kept)
			}
			if extra == 0 {
				t.Fatalf("seed %d: no fault on an extra worker in a minute", seed)
			}
		}
	}
}

// TestNemesisJudgeHistory judges again the history a failed nemesis run
// saved (-nemesis.judge FILE), with the checkers as they are now.
func TestNemesisJudgeHistory(t *testing.T) {
	if *nemesisJudge == "" {
		t.Skip("judges a saved history: run with -nemesis.judge FILE")
	}
	nr, err := torture.JudgeHistory(*nemesisJudge)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s (%s), %s, seed %d: %d grants, %d overlaps (%d after a clock step), verdicts %v, mutex judged %s",
		nr.Backend, nr.Deployment, nr.Mode, nr.Seed, nr.Grants, nr.Overlaps, nr.ClockOverlaps, nr.Verdicts, nr.MutexJudged)
	for _, bad := range nr.Judge() {
		t.Errorf("%s", bad)
	}
	if t.Failed() {
		for _, n := range nr.Notes {
			t.Log("  " + n)
		}
	}
}

// A leader stall (server-leader-stall) on the nemesis mode's ZooKeeper
// ensemble holds back what the leader sends a follower while what the
// follower sends flows: with syncLimit 2 the follower stops serving
// within a few ticks, and serves again once the stall ends. (Without the
// stall on its quorum link, it would go on following.) The stall is one
// way: the follower's messages reach the leader's port throughout, and
// nothing comes back (a cut both ways, or the other way, would stop the
// follower too).
func TestZooKeeperLeaderStall(t *testing.T) {
	nt, st := zkNemesisTarget(t)
	serving := func(i int) bool {
		mode, err := nt.ZK.Members[i].Mode()
		return err == nil && (mode == "leader" || mode == "follower")
	}
	within := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range nt.ZK.Members {
		within(fmt.Sprintf("server %d to serve", i), func() bool { return serving(i) })
	}
	f, what := nt.LeaderStalls(0, true)
	t.Log(what)
	if f < 0 {
		t.Fatalf("no follower stalled: %s", what)
	}
	within(fmt.Sprintf("server %d, whose leader's messages stall, to stop serving", f), func() bool { return !serving(f) })
	forwarded := func() (sent, replied int64) {
		for _, p := range st.links {
			s, r := p.Forwarded()
			sent, replied = sent+s, replied+r
		}
		return sent, replied
	}
	sent, replied := forwarded()
	within(fmt.Sprintf("server %d's messages to reach its leader's port during the stall", f), func() bool {
		s, _ := forwarded()
		return s > sent
	})
	if _, r := forwarded(); r != replied {
		t.Fatalf("the leader's port sent server %d %d bytes during the stall", f, r-replied)
	}
	// The other two serve (a hiccup of one of them may drop the quorum for
	// a moment: they are waited for, as the rest).
	within(fmt.Sprintf("the servers other than %d to serve while its link from its leader stalls", f), func() bool {
		return len(slices.DeleteFunc([]int{0, 1, 2}, func(i int) bool { return i == f || !serving(i) })) == 2
	})
	if g, what := nt.LeaderStalls(0, false); g != f {
		t.Fatalf("the end of the stall freed server %d (%s); want %d", g, what, f)
	}
	within(fmt.Sprintf("server %d to serve again after the stall", f), func() bool { return serving(f) })
}
