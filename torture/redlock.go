package torture

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/redlock"
	"github.com/distlock/distlock/testserver"
)

// backendRedlock is the kind of a Target of independent Redis servers
// locked with package redlock (a majority of votes per grant).
const backendRedlock = "redlock"

// redlockNodes is the size of the redlock targets: the guide's five.
const redlockNodes = 5

// RedlockTarget starts redlockNodes independent redis-servers (no
// replication; no persistence unless opts ask for it) and returns the
// Target over them.
func RedlockTarget(t testing.TB, opts ...testserver.RedisOption) Target {
	t.Helper()
	return Target{Kind: backendRedlock, Redlock: startRedlockNodes(t, redlockNodes, opts...)}
}

// startRedlockNodes starts n independent redis-servers, each marked
// seeded, as a deployment is once its first round has heard every node:
// the rows are about faults, not about a deployment's first seconds.
func startRedlockNodes(t testing.TB, n int, opts ...testserver.RedisOption) []*testserver.Redis {
	t.Helper()
	nodes := make([]*testserver.Redis, n)
	for i := range nodes {
		nodes[i] = testserver.StartRedis(t, opts...)
		if _, err := nodes[i].Do("SET", redlockSeedKey, "ok"); err != nil {
			t.Fatalf("torture: mark redlock node %s seeded: %v", nodes[i].Addr, err)
		}
	}
	return nodes
}

func redlockAddrs(nodes []*testserver.Redis) []string {
	a := make([]string, len(nodes))
	for i, n := range nodes {
		a[i] = n.Addr
	}
	return a
}

// redlockURL is the redlock:// URL of the servers at addrs, with options
// ("name=value&...") added.
func redlockURL(addrs []string, options string) string {
	u := "redlock://" + strings.Join(addrs, ",") + "/0?dial_timeout=2s&read_timeout=2s&write_timeout=2s"
	if options != "" {
		u += "&" + options
	}
	return u
}

// openRedlock opens a worker's redlock Backend.
func openRedlock(ctx context.Context, r request) (driver.Backend, io.Closer, error) {
	b, err := redlock.OpenURL(ctx, r.URL)
	if err != nil {
		return nil, nil, err
	}
	return b, b, nil
}

// redlockVia returns the addresses of nodes with those named in cut
// replaced by fault proxies (started on the Run), and the proxies.
func redlockVia(r *Run, nodes []*testserver.Redis, cut ...int) ([]string, []*faultproxy.Proxy) {
	addrs := redlockAddrs(nodes)
	var ps []*faultproxy.Proxy
	for _, i := range cut {
		p := r.Proxy(nodes[i].Addr)
		addrs[i] = p.Addr()
		ps = append(ps, p)
	}
	return addrs, ps
}

// resetAndHeal drops what p held back (closing its connections) and heals
// it: a request held in a blackhole would otherwise land after the heal,
// and a late acquire vote for the holder can give it back a majority.
func resetAndHeal(p *faultproxy.Proxy) {
	p.Reset()
	p.Heal()
}

func eachProxy(ps []*faultproxy.Proxy, f func(*faultproxy.Proxy)) func() {
	return func() {
		for _, p := range ps {
			f(p)
		}
	}
}

// The Redlock rows: the holder's own faults as on Redis, faults of one
// node (a minority: the lock must hold), the holder cut off from a
// majority, a node killed under each persistence setting, and the clock
// jump of the guide's scenario.
func init() {
	addRow("pause", backendRedlock, ExpectBite, "", nil)
	addRow("delay", backendRedlock, ExpectBite, "", nil)
	addRow("partition", backendRedlock, ExpectBite, "the holder is cut off from 3 of the 5 nodes: its refreshes gather no majority, and the waiter is granted once the grant lapsed on them", redlockPartitionScenario)
	addRow("holder-kill", backendRedlock, ExpectHold, "", nil)
	addRow("late-release/owner-checked", backendRedlock, ExpectHold, "", nil)
	notRow("server-kill/no-fsync", backendRedlock, "see node-kill")
	notRow("server-kill/fsync", backendRedlock, "see node-kill")
	notRow("leader-kill", backendRedlock, "no leader: see node-kill")
	notRow("failover/missed-1", backendRedlock, "no replication between the nodes: a node that lost grants is node-kill")
	notRow("failover/missed-2", backendRedlock, "see failover/missed-1")
	notRow("late-release/naive", backendRedlock, "no naive Redlock release built")
	notRow("lost-reply/naive", backendRedlock, "no naive Redlock lock built")
	notRow("lost-reply/distlock", backendRedlock, "not run here: redlock's own tests drop the replies of one and of two nodes in a faultproxy (nothing orphaned, no double grant)")
	notRow("lost-reply/distlock-no-retry", backendRedlock, "not run here: see lost-reply/distlock")
	findings["partition"] += " On Redlock the holder is cut off from a majority of the nodes (3 of 5): the same, with the waiter granted by all five once the grant lapsed on them."
	findings["pause"] += " On Redlock likewise: the grant lapses on every node during the pause."

	single := func(why string) map[string]string {
		return map[string]string{backendRedis: why, backendEtcd: why, backendFile: why, backendZK: why, backendPG: why, backendGateway: why}
	}
	Scenarios = append(Scenarios,
		Scenario{
			Name:   "node-pause",
			Title:  "one of the 5 Redlock nodes SIGSTOPped for twice the TTL while a lock is held and another client waits; the holder keeps refreshing, checking its lock before each write",
			Expect: map[string]Expect{backendRedlock: ExpectHold},
			Why: mergeWhy(single("one lock server (or a consensus group): see pause, server-kill and leader-kill"), backendRedlock,
				"a minority cannot break the lock: the holder's refreshes gather 4 of 5 votes, the waiter's tries at most the paused node's"),
			Run: redlockNodeFault("node-pause", 0),
		},
		Scenario{
			Name:   "node-delay",
			Title:  "the links of every client to one of the 5 Redlock nodes delayed past the per-node timeout for twice the TTL while a lock is held and another client waits",
			Expect: map[string]Expect{backendRedlock: ExpectHold},
			Why: mergeWhy(single("one lock server (or a consensus group): see delay"), backendRedlock,
				"the delayed node's answers come after the per-node timeout (here TTL/4): no request counts them, and the other four keep the quorum"),
			Run: redlockNodeFault("node-delay", 0),
		},
		Scenario{
			Name: "node-partition", Variant: "one",
			Title:  "one of the 5 Redlock nodes cut off from every client (proxy blackhole) for twice the TTL while a lock is held and another client waits",
			Expect: map[string]Expect{backendRedlock: ExpectHold},
			Why: mergeWhy(single("one lock server (or a consensus group): see partition"), backendRedlock,
				"a minority cannot break the lock: see node-pause"),
			Run: redlockNodeFault("node-partition", 0),
		},
		Scenario{
			Name: "node-partition", Variant: "minority",
			Title:  "as one, with 2 of the 5 nodes cut off (the largest minority)",
			Expect: map[string]Expect{backendRedlock: ExpectHold},
			Why: mergeWhy(single("one lock server (or a consensus group): see partition"), backendRedlock,
				"the holder's refreshes gather the other 3, a bare majority; the waiter's tries at most the 2 cut-off nodes' votes, which it cannot reach"),
			Run: redlockNodeFault("node-partition", 0, 1),
		},
		Scenario{
			Name: "node-kill", Variant: "no-fsync", Own: true,
			Title:  "a lock held on a bare majority (3 of 5 nodes; the holder cannot reach the other 2), and one of its 3 nodes killed with SIGKILL and restarted empty (no persistence); another client tries at once",
			Expect: map[string]Expect{backendRedlock: ExpectHold},
			Why: mergeWhy(single("one lock server: see server-kill and leader-kill"), backendRedlock,
				"the restarted node has no seed marker and does not vote until it waited out the longest TTL and was re-seeded from a majority (redlock's Durability): the second client gathers 2 votes, not 3"),
			Run: redlockNodeKill(nodeKillEmpty),
		},
		Scenario{
			Name: "node-kill", Variant: "fsync", Own: true,
			Title:  "as no-fsync, with every node at appendonly yes, appendfsync always",
			Expect: map[string]Expect{backendRedlock: ExpectHold},
			Why: mergeWhy(single("one lock server: see server-kill and leader-kill"), backendRedlock,
				"the restarted node kept the grant and its counter"),
			Run: redlockNodeKill(nodeKillFsync),
		},
		Scenario{
			Name: "node-kill", Variant: "snapshot", Own: true, BreaksTokens: true,
			Title:  "as no-fsync, with the node restarted from an RDB snapshot taken before the grant (seed marker present, grant and counter increments missing)",
			Expect: map[string]Expect{backendRedlock: ExpectBite},
			Why: mergeWhy(single("one lock server: see server-kill and leader-kill"), backendRedlock,
				"outside redlock's documented deployment (never RDB snapshots alone): the node kept its marker, so it votes at once with a counter behind"),
			Run: redlockNodeKill(nodeKillSnapshot),
		},
		Scenario{
			Name: "clock-jump", Own: true,
			Title:  "the wall clock of the lock server (on Redlock: of one node of the holder's bare majority, the others being cut off from the holder) jumps forward past the TTL while a lock is held; a second client tries at once, and the holder, whose own clock is right, goes on writing, checking its lock",
			Expect: map[string]Expect{backendRedis: ExpectBite, backendRedlock: ExpectBite},
			Why: map[string]string{
				backendRedis:   "the server expires keys by its wall clock: the holder's key expires early, and its local deadline does not know",
				backendRedlock: "Kleppmann's scenario: the jumped node's vote counts for the second client, with the two nodes the holder could not reach; its token is still higher (the jumped node's counter is part of both majorities)",
				backendEtcd:    "etcd times leases with the leader's monotonic clock: a wall clock step does not expire them",
				backendFile:    "flock has no TTL",
				backendZK:      "ZooKeeper times sessions with the servers' monotonic clock",
				backendPG:      "not run on PostgreSQL: a session lock has no TTL; lease mode expires grants by the server's clock (pglock's doc says so) and is not run with a moved clock here",
				backendGateway: "the gateway times sessions with Go's monotonic clock",
			},
			Run:   redisClockJumpScenario,
			RunOn: map[string]func(*Fixture) error{backendRedlock: redlockClockJumpScenario},
		},
	)
	findings["node-pause"] = "A paused node times out each request after the per-node timeout (here TTL/4); the holder's refreshes are granted by the other four, its checked writes go on past the TTL, and the waiter is granted only after the holder's release."
	findings["node-delay"] = "As node-pause: a vote that comes after the per-node timeout does not count, for the holder or the waiter."
	findings["node-partition/one"] = "As node-pause: the cut-off node's grant lapses on it, which gives the waiter one vote of five."
	findings["node-partition/minority"] = "Two nodes cut off: the holder's refreshes are granted by exactly three, a bare majority, and the lock holds."
	findings["node-kill/no-fsync"] = "The holder holds its lock on exactly 3 of 5 nodes, and one of them restarts empty: without redlock's seed marker the second client would gather that node and the two the holder never reached, a majority. The restarted node has no marker and does not vote, so the second client is refused while the lock is held; the holder's next refresh gathers 2 votes and it learns of the loss, the waiter is granted after the release with a higher token, and the node votes again once re-seeded (the notes give the copied counter)."
	findings["node-kill/fsync"] = "With appendfsync always the restarted node kept the grant and its counter: the second client is refused, tokens keep increasing."
	findings["node-kill/snapshot"] = "A node restarted from an RDB snapshot older than the grant kept its seed marker but lost the grant and the counter increments since: it votes at once, and the second client gathers it and the two nodes the holder never reached, a majority, while the holder still holds its lock, with the **same token** as the holder (its counter is behind). A fence admits equal tokens, so even the fenced run loses updates: this is why redlock's doc says never to run nodes with snapshots alone (or appendfsync everysec)."
	findings["clock-jump"] = "A lock server whose wall clock jumps forward expires the holder's grant early: on Redis the key goes, on Redlock one node of the holder's bare majority frees it and votes, with the two nodes the holder could not reach, for the second client (Kleppmann's scenario). The holder's own deadline is on its own, correct, clock, so it goes on writing while the second client holds the lock: both believe they hold it (overlap). The second client's token is higher (Redis's counter does not expire; on Redlock the jumped node's counter counted the holder's grant), so the fenced store refuses the holder's writes. The clock is moved by an LD_PRELOAD shim in redis-server (testserver.WithRedisMovableClock), which adds an offset to CLOCK_REALTIME and gettimeofday, the clock Redis expires keys by."
}

// redlockNodeFault runs the faults of a minority of the nodes of the shared
// target (those named in which): the holder holds the lock on all 5 nodes
// (see holdOnEveryNode), the fault is injected, a waiter starts, and the
// holder goes on with checked writes for twice the TTL. A checked write
// more than a TTL after the fault began shows that its refreshes gathered
// a majority: the round took effect. The fault is healed before the holder
// releases; the waiter must not be granted before.
func redlockNodeFault(kind string, which ...int) func(f *Fixture) error {
	return func(f *Fixture) error {
		r := f.Run
		nodes := f.Target.Redlock
		addrs := redlockAddrs(nodes)
		var inject, heal func() error
		switch kind {
		case "node-pause":
			inject = func() error {
				for _, k := range which {
					if err := nodes[k].Pause(); err != nil {
						return err
					}
				}
				return nil
			}
			heal = func() error {
				for _, k := range which {
					if err := nodes[k].Resume(); err != nil {
						return err
					}
				}
				return nil
			}
		default:
			var ps []*faultproxy.Proxy
			addrs, ps = redlockVia(r, nodes, which...)
			inject = func() error {
				for _, p := range ps {
					if kind == "node-delay" {
						// Past the per-node timeout (TTL/4), and long
						// enough that a reply is not read before the next
						// request.
						p.Delay(f.P.TTL / 2)
					} else {
						p.Blackhole()
					}
				}
				return nil
			}
			heal = func() error { eachProxy(ps, (*faultproxy.Proxy).Heal)(); return nil }
		}
		// A per-node timeout of a quarter of the TTL (instead of a tenth):
		// on a loaded machine, 3 of the 4 other nodes answer a refresh
		// within it.
		u := redlockURL(addrs, fmt.Sprintf("request_timeout=%v", f.P.TTL/4))
		ws := f.Workers(map[string]WorkerConfig{"A": {URL: u}, "B": {URL: u}})
		a, b := ws["A"], ws["B"]
		for round := range f.rounds() {
			ta, err := f.warmThenHold(a, b)
			if err != nil {
				return err
			}
			if ta, err = holdOnEveryNode(f, a, ta); err != nil {
				return err
			}
			if err := inject(); err != nil {
				return err
			}
			at := r.Fault("", fmt.Sprintf("%s of nodes %v", kind, which))
			r.MarkFault(a)
			bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
			span := 2 * f.P.TTL
			var lastOK int64
			lost := ""
			for r.Clock.Now()-at < int64(span) {
				res := a.RMW(f.Res, RMWOptions{})
				if ErrKind(res.Err) == kindNotLive {
					lost = "A's lock ended during the fault"
					break
				}
				if res.Err != nil {
					return res.Err
				}
				if res.Outcome == writeOK {
					lastOK = r.Clock.Now()
				}
				time.Sleep(f.P.TTL / 10) // the workload's pace
			}
			early := false
			select {
			case bres := <-bc:
				early = true
				r.Notef("round %d: B was granted token %d during the fault (err %v)", round, bres.Token, bres.Err)
				bc = closedGrant(bres)
			default:
			}
			if err := heal(); err != nil {
				return err
			}
			r.Fault("", "healed")
			// A checked write more than a TTL after the fault began proves
			// that a refresh sent during the fault counted: the guard was
			// exercised. A loss after it (a node of the bare majority that
			// a stalled machine kept from answering in time) is the
			// library's to report and the checkers' to judge; it does not
			// undo the proof.
			if lastOK-at > int64(f.P.TTL) {
				r.Injected()
				note := fmt.Sprintf("round %d: A (token %d) wrote with its lock checked %v after the fault began (TTL %v): refreshed by the majority", round, ta, time.Duration(lastOK-at).Round(time.Millisecond), f.P.TTL)
				if lost != "" {
					note += "; then " + lost
				}
				if !early {
					note += "; B waited"
				}
				r.Notef("%s", note)
			} else {
				r.Notef("round %d: A's last checked write %v after the fault began; %s", round, time.Duration(lastOK-at).Round(time.Millisecond), lost)
			}
			if err := a.Release(); err != nil {
				r.Notef("round %d: A's release: %s", round, ErrKind(err))
			}
			bres, ok, err := waitGrant(bc, time.Minute)
			if !ok {
				return fmt.Errorf("B not granted after A's release: %v", err)
			}
			if !early {
				r.Notef("round %d: B granted token %d after A's release", round, bres.Token)
			}
			if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
			if err := f.release(b); err != nil {
				return err
			}
		}
		return nil
	}
}

// closedGrant returns a channel that yields res.
func closedGrant(res AcquireResult) <-chan AcquireResult {
	c := make(chan AcquireResult, 1)
	c <- res
	return c
}

// redlockPartitionScenario cuts the holder off from a majority of the
// nodes (0, 1 and 2) and runs the partition rounds.
func redlockPartitionScenario(f *Fixture) error {
	addrs, ps := redlockVia(f.Run, f.Target.Redlock, 0, 1, 2)
	ws := f.Workers(map[string]WorkerConfig{"A": {URL: redlockURL(addrs, "")}, "B": {}})
	return partitionRounds(f, ws["A"], ws["B"], eachProxy(ps, (*faultproxy.Proxy).Blackhole), eachProxy(ps, (*faultproxy.Proxy).Heal),
		"links to nodes 0, 1, 2 blackholed")
}

// How the node of a node-kill row keeps its data.
const (
	nodeKillEmpty    = iota // no persistence: restarts empty
	nodeKillFsync           // appendonly yes, appendfsync always
	nodeKillSnapshot        // restarts from an RDB snapshot taken before the grant
)

// redlockSeedKey is the seed marker key of redlock's default prefix.
const redlockSeedKey = redlock.DefaultPrefix + "node:seed"

// holdOnEveryNode returns once every node of the target holds the grant of
// a, which holds the key with token ta; until then a takes the key again.
// A grant needs a majority only: a node that a release had just reserved
// for the waiter it woke, or whose vote came after the per-node timeout,
// is left out of it. Were such a node outside the fault's minority, the
// fault would leave a grant on less than a majority, and the round would
// show a lock lost, not a lock held by the majority.
func holdOnEveryNode(f *Fixture, a *Worker, ta uint64) (uint64, error) {
	nodes := f.Target.Redlock
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := redlockHolders(nodes, f.Key, ta)
		if err != nil {
			return 0, err
		}
		if n == len(nodes) {
			return ta, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("A's grant never held on every node (token %d on %d of %d)", ta, n, len(nodes))
		}
		f.Run.Notef("A's grant (token %d) is held on %d of %d nodes: A takes the key again", ta, n, len(nodes))
		if err := f.release(a); err != nil {
			return 0, err
		}
		// A node that holds another grant (a late vote, a release still
		// retried) or is kept for a woken waiter refuses every other try
		// until that ends: taking the key before would leave it out again.
		if !Eventually(time.Minute, func() bool { return redlockBusy(nodes, f.Key) == 0 }) {
			return 0, fmt.Errorf("a node stayed held or reserved after A's release")
		}
		if ta, err = a.Acquire(f.Key, Acq{Wait: true}); err != nil {
			return 0, err
		}
	}
}

// redlockHolders returns how many of nodes hold the grant of key whose
// token is tok. A node's lock value is "<secret>|<counter>|<since>|<owner>":
// the secret is the grant's on every node, and the token is the highest
// counter of its voters, which a majority of them record. So the grant is
// the secret recorded with tok, and its holders the nodes with that secret.
func redlockHolders(nodes []*testserver.Redis, key string, tok uint64) (int, error) {
	vals := make([]string, len(nodes))
	secret := ""
	for i, node := range nodes {
		v, err := node.Do("GET", redlock.DefaultPrefix+redislock.HashTag(key)+":lock")
		if err != nil {
			return 0, err
		}
		vals[i], _ = v.(string)
		if f := strings.Split(vals[i], "|"); len(f) > 1 && f[1] == strconv.FormatUint(tok, 10) {
			secret = f[0]
		}
	}
	n := 0
	for _, v := range vals {
		if secret != "" && strings.HasPrefix(v, secret+"|") {
			n++
		}
	}
	return n, nil
}

// redlockBusy returns how many of nodes hold a grant of key or keep it for
// a waiter that a release woke (its lock or reservation key exists), -1 if
// one cannot be asked.
func redlockBusy(nodes []*testserver.Redis, key string) int {
	base := redlock.DefaultPrefix + redislock.HashTag(key)
	n := 0
	for _, node := range nodes {
		v, err := node.Do("EXISTS", base+":lock", base+":woken")
		if err != nil {
			return -1
		}
		if c, _ := v.(int64); c > 0 {
			n++
		}
	}
	return n
}

// redlockSettle waits until no node holds a grant of the key or keeps it
// for a woken waiter. A release returns once a majority of the nodes have
// released: the others' requests may still be on their way, so a scenario
// that cuts links right after the warm-up would leave the warm-up's last
// grant on the nodes behind them until it expires, and a try that needs
// those nodes is refused for that, not for the fault.
func redlockSettle(f *Fixture, nodes []*testserver.Redis) error {
	if !Eventually(time.Minute, func() bool { return redlockBusy(nodes, f.Key) == 0 }) {
		return fmt.Errorf("a node stayed held or reserved after the warm-up")
	}
	return nil
}

// redlockCounter reads key's counter on node.
func redlockCounter(node *testserver.Redis, key string) (int64, error) {
	return redisInt(node, redlock.DefaultPrefix+redislock.HashTag(key)+":token")
}

// redlockNodeKill: the holder A reaches nodes 0, 1, 2 only (its links to 3
// and 4 are blackholed while it acquires), so its grant is on a bare
// majority; node 0 is killed and restarted, and B, which reaches all five,
// tries once while A holds the lock. Whether B gathers a majority is up to
// what node 0 kept.
func redlockNodeKill(mode int) func(f *Fixture) error {
	return func(f *Fixture) error {
		r := f.Run
		var opts []testserver.RedisOption
		if mode == nodeKillFsync {
			opts = append(opts, testserver.WithRedisAppendOnly())
		}
		nodes := startRedlockNodes(f.T, redlockNodes, opts...)
		f.Target.Redlock = nodes
		// A TTL long enough that A does not refresh (and learn of the
		// loss) in the time the restart takes, and a max_ttl of the same,
		// so that the restarted node is re-seeded within the round.
		ttl := 3 * time.Second
		opt := fmt.Sprintf("max_ttl=%v&request_timeout=200ms", ttl)
		aAddrs, cut := redlockVia(r, nodes, 3, 4)
		ws := f.Workers(map[string]WorkerConfig{
			"A": {URL: redlockURL(aAddrs, opt), TTL: ttl, RenewEvery: ttl / 2},
			"B": {URL: redlockURL(redlockAddrs(nodes), opt), TTL: ttl, RenewEvery: ttl / 2},
		})
		a, b := ws["A"], ws["B"]
		for round := range f.rounds() {
			if err := f.Warm(a, b); err != nil {
				return err
			}
			// Settled before the snapshot too: a snapshot of node 0 taken
			// while the warm-up's last release was on its way would keep
			// the warm-up's grant across the restart.
			if err := redlockSettle(f, nodes); err != nil {
				return err
			}
			if mode == nodeKillSnapshot {
				if _, err := nodes[0].Do("SAVE"); err != nil {
					return err
				}
				r.Fault("", "node 0: SAVE (RDB snapshot)")
			}
			eachProxy(cut, (*faultproxy.Proxy).Blackhole)()
			r.Fault("A", "links to nodes 3, 4 blackholed")
			ta, err := a.Acquire(f.Key, Acq{Wait: true})
			if err != nil {
				return err
			}
			if res := a.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
			nodes[0].Kill()
			r.Fault("", "node 0 kill -9")
			r.MarkFault(a)
			nodes[0].Restart(f.T)
			r.Fault("", "node 0 restarted")
			seed, _ := nodes[0].Do("GET", redlockSeedKey)
			tb, berr := b.Acquire(f.Key, Acq{Wait: false, NoRetry: true})
			switch {
			case berr == nil:
				r.Notef("round %d: A holds token %d on nodes 0-2; node 0 restarted (seed marker %v) and voted: B was granted token %d", round, ta, seed, tb)
				ok, err := staleInterleave(f, a, b)
				if err != nil {
					return err
				}
				if ok {
					r.Injected()
				}
				if err := f.release(b); err != nil {
					return err
				}
			case ErrKind(berr) == kindNotAcquired:
				// Effective if A's lock was still live after B's try.
				if _, err := a.Read(f.Res, false); err == nil {
					r.Injected()
					r.Notef("round %d: A holds token %d on nodes 0-2; node 0 restarted (seed marker %v); B's try while A held the lock: refused", round, ta, seed)
				} else if ErrKind(err) == kindNotLive {
					r.Notef("round %d: A's lock had ended before B's try was over: no overlap to show", round)
				} else {
					return err
				}
			default:
				return fmt.Errorf("B's try: %w", berr)
			}
			eachProxy(cut, resetAndHeal)()
			r.Fault("A", "healed")
			// Without node 0's vote A's refreshes gather 2 of 5: it learns
			// of the loss at its next one. With fsync it still holds.
			if mode != nodeKillFsync && !r.waitEnded(a, time.Minute) {
				return fmt.Errorf("A's lock context never ended")
			}
			relErr := a.Release()
			bres, ok, err := waitGrant(b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: time.Minute}), time.Minute)
			if !ok {
				return fmt.Errorf("B not granted after A's release: %v", err)
			}
			r.Notef("round %d: A's release: %v; B granted token %d after it (A's was %d)", round, kindOrOK(relErr), bres.Token, ta)
			if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
			if err := f.release(b); err != nil {
				return err
			}
			if mode == nodeKillEmpty {
				if err := waitReseeded(f, a, nodes[0], ta); err != nil {
					return err
				}
			}
		}
		return nil
	}
}

func kindOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return ErrKind(err)
}

// waitReseeded has a take the key until node's seed marker is "ok" again
// (re-seeding is done by a granted round once the wait is over), and notes
// the counter it was given.
func waitReseeded(f *Fixture, a *Worker, node *testserver.Redis, ta uint64) error {
	start := time.Now()
	ok := Eventually(time.Minute, func() bool {
		if v, err := node.Do("GET", redlockSeedKey); err == nil && v == "ok" {
			return true
		}
		if _, err := a.Acquire(f.Key, Acq{Wait: true}); err != nil {
			return false
		}
		_ = a.Release()
		time.Sleep(250 * time.Millisecond) // the workload's pace
		return false
	})
	if !ok {
		v, _ := node.Do("GET", redlockSeedKey)
		return fmt.Errorf("node 0 never re-seeded (marker %v)", v)
	}
	c, err := redlockCounter(node, f.Key)
	if err != nil {
		return err
	}
	f.Run.Notef("node 0 re-seeded %v after the round: its counter for the key is %d (A's token was %d)", time.Since(start).Round(time.Millisecond), c, ta)
	return nil
}

// staleInterleave has a, which believes it holds the lock, increment the
// resource around b's increments: a reads, b increments, a writes what it
// read plus one (a stale write: a fence refuses it, an unfenced store
// loses b's increment), b increments again. Both check their lock before
// each step. It reports false when a's lock was no longer live at the
// start.
func staleInterleave(f *Fixture, a, b *Worker) (bool, error) {
	va, err := a.Read(f.Res, false)
	if ErrKind(err) == kindNotLive {
		f.Run.Notef("%s's lock had already ended: no overlap to show", a.Name)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
		return false, res.Err
	}
	oa, err := a.Write(f.Res, va+1, false)
	if err != nil {
		return false, err
	}
	if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
		return false, res.Err
	}
	f.Run.Notef("%s, its lock checked, wrote after %s's increment: %s", a.Name, b.Name, oa)
	return oa != writeSkipped, nil
}

// redisClockJumpScenario jumps the clock of a single Redis past the
// holder's TTL.
func redisClockJumpScenario(f *Fixture) error {
	srv := testserver.StartRedis(f.T, testserver.WithRedisMovableClock())
	f.Target.Redis = srv
	ttl := 4 * time.Second
	cfg := WorkerConfig{TTL: ttl, RenewEvery: ttl / 2}
	ws := f.Workers(map[string]WorkerConfig{"A": cfg, "B": cfg})
	a, b := ws["A"], ws["B"]
	return clockJumpRounds(f, a, b, ttl, func() (string, func(), error) {
		return "", func() {
			srv.Clock.Jump(ttl + time.Second)
			f.Run.Fault("", fmt.Sprintf("redis clock jumped forward by %v", ttl+time.Second))
		}, nil
	})
}

// redlockClockJumpScenario is Kleppmann's scenario: A is granted by nodes
// 0, 1, 2 (its links to 3 and 4 are blackholed), node 2's clock jumps
// forward past the TTL, and B gathers nodes 2, 3, 4.
func redlockClockJumpScenario(f *Fixture) error {
	r := f.Run
	nodes := startRedlockNodes(f.T, redlockNodes, testserver.WithRedisMovableClock())
	f.Target.Redlock = nodes
	ttl := 4 * time.Second
	opt := "request_timeout=200ms"
	aAddrs, cut := redlockVia(r, nodes, 3, 4)
	ws := f.Workers(map[string]WorkerConfig{
		"A": {URL: redlockURL(aAddrs, opt), TTL: ttl, RenewEvery: ttl / 2},
		"B": {URL: redlockURL(redlockAddrs(nodes), opt), TTL: ttl, RenewEvery: ttl / 2},
	})
	a, b := ws["A"], ws["B"]
	return clockJumpRounds(f, a, b, ttl, func() (string, func(), error) {
		if err := redlockSettle(f, nodes); err != nil {
			return "", nil, err
		}
		eachProxy(cut, (*faultproxy.Proxy).Blackhole)()
		return "", func() {
			nodes[2].Clock.Jump(ttl + time.Second)
			r.Fault("", fmt.Sprintf("node 2's clock jumped forward by %v", ttl+time.Second))
		}, nil
	}, eachProxy(cut, resetAndHeal))
}

// clockJumpRounds: a takes the key; prepare's jump (or, for a two-step
// fault, the function it returns, called after a holds the key) expires
// a's grant early (prepare runs after the warm-up, and fails the round
// if the fault cannot be set up); b tries once, and if granted, a and b interleave.
func clockJumpRounds(f *Fixture, a, b *Worker, ttl time.Duration, prepare func() (string, func(), error), heal ...func()) error {
	r := f.Run
	for round := range f.rounds() {
		if err := f.Warm(a, b); err != nil {
			return err
		}
		note, after, err := prepare()
		if err != nil {
			return err
		}
		if note != "" {
			r.Fault("", note)
		}
		ta, err := a.Acquire(f.Key, Acq{Wait: true})
		if err != nil {
			return err
		}
		if res := a.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		after()
		r.MarkFault(a)
		tb, err := b.Acquire(f.Key, Acq{Wait: false, NoRetry: true})
		granted := err == nil
		if !granted {
			r.Notef("round %d: B was not granted after the jump: %s (%v)", round, ErrKind(err), err)
		} else {
			r.Notef("round %d: A holds token %d; after the jump B was granted token %d", round, ta, tb)
			ok, err := staleInterleave(f, a, b)
			if err != nil {
				return err
			}
			if ok {
				r.Injected()
			}
			if err := f.release(b); err != nil {
				return err
			}
		}
		for _, h := range heal {
			h()
		}
		// A learns of the loss at its next refresh.
		if granted && !r.waitEnded(a, time.Minute) {
			return fmt.Errorf("A's lock context never ended")
		}
		if err := a.Release(); err != nil {
			r.Notef("round %d: A's release: %s", round, ErrKind(err))
		}
	}
	return nil
}
