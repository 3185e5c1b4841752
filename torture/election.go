package torture

import (
	"fmt"
	"strings"
	"time"

	"github.com/distlock/distlock/testserver"
)

// observerName is the worker that follows an election row's leader.
const observerName = "O"

// The election rows: package election's terms under the faults of the
// lock rows. The workers campaign instead of acquiring (see
// Scenario.Election), so the generic scenarios run unchanged on terms:
// the mutex model checks that terms do not overlap, the token model that
// they increase, the register that a fenced store refuses an old term.
func init() {
	Scenarios = append(Scenarios,
		Scenario{
			Name: "election", Variant: "pause", Election: true,
			Title: "as pause, on an election: the leader, having checked its term, is SIGSTOPped past its TTL; another candidate's Campaign returns and it writes; then the old leader resumes and writes with its old term's token",
			Expect: map[string]Expect{backendRedis: ExpectBite, backendRedlock: ExpectBite, backendEtcd: ExpectBite,
				backendZK: ExpectBite, backendPG: ExpectBite, backendGateway: ExpectBite},
			Why: map[string]string{
				backendPG:   "pglock in lease mode (a session lock has no TTL: a stopped leader keeps its term, see pause)",
				backendFile: "flock has no TTL: a stopped leader keeps its term and nobody else is elected (see pause)",
			},
			Run:   pauseScenario,
			RunOn: map[string]func(*Fixture) error{backendPG: inLeaseMode(pauseScenario)},
		},
		Scenario{
			Name: "election", Variant: "partition", Election: true,
			Title: "as partition, on an election: the leader cut off from the service (proxy blackhole) keeps writing with its term's token, ignoring its term's context, after another candidate was elected",
			Expect: map[string]Expect{backendRedis: ExpectBite, backendRedlock: ExpectBite, backendEtcd: ExpectBite,
				backendZK: ExpectBite, backendGateway: ExpectBite},
			Why: map[string]string{
				backendRedlock: "the leader is cut off from 3 of the 5 nodes",
				backendPG:      "a session cut off keeps its lock (see partition)",
				backendFile:    "no network between a process and its kernel",
			},
			Run:   partitionScenario,
			RunOn: map[string]func(*Fixture) error{backendRedlock: redlockPartitionScenario},
		},
		Scenario{
			Name: "election", Variant: "server-kill", Election: true,
			Title: "the lock service killed with SIGKILL and restarted while a leader leads (Redis and 5 Redlock nodes with appendfsync always, etcd, ZooKeeper, PostgreSQL, the gateway); the leader goes on, checking its term before each write, and resigns; another candidate campaigns after the restart; a third process follows the leader with Observe",
			Expect: map[string]Expect{backendRedis: ExpectHold, backendRedlock: ExpectHold, backendEtcd: ExpectHold,
				backendZK: ExpectHold, backendPG: ExpectHold, backendGateway: ExpectHold},
			Why: map[string]string{
				backendRedis:   "its own server, appendonly yes, appendfsync always (see server-kill/no-fsync for a server that forgets)",
				backendRedlock: "5 nodes of its own, all killed at once, appendfsync always",
				backendEtcd:    "the single-member cluster killed and restarted from its WAL (see leader-kill for a 3-member cluster)",
				backendZK:      "the standalone server killed and restarted from its transaction log: sessions outlive the restart on the server, the leader's safe window may not",
				backendPG:      "its own server, fsync=on; the leader's session ends with the server, so its term is lost",
				backendGateway: "the gateway killed and restarted (see gateway-kill)",
				backendFile:    "no server",
			},
			Run: electionServerKillScenario,
		},
	)
	findings["election/pause"] = "A term is a lease like a lock's: the frozen leader's term ends by its local deadline before the service elects another candidate (checked in every round: its deadline as it stood when it was stopped comes before the other candidate's Campaign returns, on the machine's wall clock; its context, which a stopped process cancels only once it runs again, may still be uncancelled at its late write), but a leader paused between its check and its write still writes, with its old term's token, after the new leader wrote. Without a fence the store takes it; a fenced store refuses it, on every backend."
	findings["election/partition"] = "The cut-off leader's term context is cancelled by its local deadline before the service lets the term lapse and elects the next candidate (the mutex model holds; detection takes about the usable TTL, on ZooKeeper the session's safe window), but a leader that ignores its context keeps writing: only the fence refuses its writes."
	findings["election/server-kill"] = "Terms stay strictly increasing across a restart of the service, and no two terms are live at once. Where the service keeps the term (Redis and Redlock with appendfsync always, etcd, and ZooKeeper when it is back within the session's safe window) the leader leads on through the restart and the next candidate is elected after its resignation; where it does not (PostgreSQL's session, the gateway's session, a ZooKeeper restart slower than the safe window) the leader's term ends first and its checked writes stop. The observer, a third process, received leaders in term order, each with its candidate's value, and received the leader elected after the restart in every round; it does not see every term (Observe reports states), and the notes say which it saw. Every leader it received carried a term of the run and its candidate's value, through the gateway too, which reads an election's leader through its own route rather than by listing."
}

// electionServerKillScenario kills the lock service with SIGKILL and
// restarts it while A leads; B campaigns once the service is back; A goes
// on leading, checking its term before each write, then resigns. Whether
// A's term survives depends on the service (its notes say); what must hold
// is that no two terms are live at once and that B's term is above A's.
func electionServerKillScenario(f *Fixture) error {
	r := f.Run
	what, kill, restart, err := f.killableService()
	if err != nil {
		return err
	}
	// A long TTL with a renewal at TTL/2: a leader whose term the service
	// kept does not lose it locally while the service restarts.
	ttl := 6 * time.Second
	cfg := WorkerConfig{TTL: ttl, RenewEvery: ttl / 2}
	ws := f.Workers(map[string]WorkerConfig{"A": cfg, "B": cfg})
	a, b := ws["A"], ws["B"]
	for round := range f.rounds() {
		ta, err := f.warmThenHold(a, b)
		if err != nil {
			return err
		}
		kill()
		r.Fault("", what+" kill -9")
		r.MarkFault(a)
		if err := restart(); err != nil {
			return err
		}
		r.Fault("", what+" restarted")
		bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
		// A leads on, paced, checking its term before each write.
		var outs []string
		for range 3 {
			res := checkedRMW(a, f.Res)
			if res.Err != nil {
				return res.Err
			}
			outs = append(outs, res.Outcome)
			if res.Outcome == kindNotLive {
				break
			}
			// The workload's pace only: nothing waits on it or checks what
			// happened during it, so a slow machine changes the number of
			// writes, never a verdict.
			time.Sleep(100 * time.Millisecond)
		}
		relErr := a.Release()
		bres, ok, err := waitGrant(bc, 2*time.Minute)
		if !ok {
			return fmt.Errorf("B not elected after the restart: %v", err)
		}
		r.Injected()
		r.Notef("round %d: %s killed and restarted while A led with term %d; A's checked writes after the restart: %s; A's resignation: %s; B elected with term %d",
			round, what, ta, strings.Join(outs, ","), errKindOrOK(relErr), bres.Token)
		if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		// B leads until the observer has reported it: the last state
		// reaches Observe's receiver, after the restart too.
		if !f.waitObserved(bres.Token, 30*time.Second) {
			f.Res0.ObserveViolations++
			r.Notef("round %d: the observer did not report B's term %d within 30s of B's election", round, bres.Token)
		}
		if err := f.release(b); err != nil {
			return err
		}
	}
	return nil
}

// waitObserved waits up to d until the observer has received the leader
// of term token; it reports whether it has.
func (f *Fixture) waitObserved(token uint64, d time.Duration) bool {
	r, o := f.Run, f.observer
	return Eventually(d, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, l := range o.leaders {
			if l.token == token {
				return true
			}
		}
		return false
	})
}

// checkedRMW is an increment by w that checks its lock before the read and
// the write; a lock found ended is the outcome "not-live", not an error.
func checkedRMW(w *Worker, resource string) RMWResult {
	res := w.RMW(resource, RMWOptions{})
	if ErrKind(res.Err) == kindNotLive {
		res.Err, res.Outcome = nil, kindNotLive
	}
	return res
}

// killableService points f's target at a lock service that the
// server-kill election row may kill: servers of its own where the shared
// ones are not durable (Redis, Redlock) or hold the pg-fenced store's data
// (PostgreSQL), the shared single server elsewhere. It returns what it is
// called in the timeline and how to kill and restart it.
func (f *Fixture) killableService() (what string, kill func(), restart func() error, err error) {
	t := f.T
	switch f.Target.Kind {
	case backendRedis:
		srv := testserver.StartRedis(t, testserver.WithRedisAppendOnly())
		f.Target.Redis = srv
		return "redis", srv.Kill, func() error { srv.Restart(t); return nil }, nil
	case backendRedlock:
		nodes := startRedlockNodes(t, redlockNodes, testserver.WithRedisAppendOnly())
		f.Target.Redlock = nodes
		return "every redlock node", func() {
				for _, n := range nodes {
					n.Kill()
				}
			}, func() error {
				for _, n := range nodes {
					n.Restart(t)
				}
				return nil
			}, nil
	case backendEtcd:
		e := f.Target.Etcd
		m := e.Members[0]
		return "etcd", m.Kill, func() error { m.Restart(t); e.WaitHealthy(t); return nil }, nil
	case backendZK:
		z := f.Target.ZK
		m := z.Members[0]
		return "zookeeper", m.Kill, func() error { m.Restart(t); z.WaitReady(t); return nil }, nil
	case backendPG:
		srv := testserver.StartPostgres(t)
		if _, err := pgPrepare(srv); err != nil {
			return "", nil, nil, err
		}
		f.Target.PG = srv
		return "postgres", srv.Kill, func() error { srv.Restart(t); return nil }, nil
	case backendGateway:
		gw := f.Target.Gateway
		return "gateway", gw.Kill, gw.Restart, nil
	}
	return "", nil, nil, fmt.Errorf("no service to kill on %s", f.Target.Kind)
}

// checkObserved judges what the observer received: leaders in term order
// (a token never below one received before), each with the value of the
// candidate its term was granted to, and a channel that stays open while
// the run lasts (Observe's ends with its context or the Client, neither of
// which ends before the worker exits). A leader with no value, or with a
// token no grant of the run has, is an error, with two exemptions that
// backends document. On ZooKeeper the node of a failed or cancelled
// acquire that ZooKeeper has not yet confirmed deleted "may hold the lock
// for nobody" (zklock's "Not guaranteed"), so a token no grant has is only
// noted there when its value is that of a candidate one of whose campaigns
// of the key failed. On Redlock, Holder reports a grant whose token is
// still being settled with the highest counter of the nodes it heard,
// which can be below the token handed out (redlock's "Holder and watch"),
// so a token no grant has is only noted there when the next term the
// observer received that a grant has is the same candidate's, above it. Its final state is judged too: after the last
// resignation the observer must report "no leader" within 30s (Observe's
// last state reaches its receiver), and it must have reported the last
// term (which the row held until it had: see Fixture.release).
func (f *Fixture) checkObserved() {
	r, o := f.Run, f.observer
	last := func() (observed, int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(o.leaders) == 0 {
			return observed{}, 0
		}
		return o.leaders[len(o.leaders)-1], len(o.leaders)
	}
	var errs []string
	if !Eventually(30*time.Second, func() bool {
		l, n := last()
		return n > 0 && !l.closed && l.token == 0
	}) {
		l, _ := last()
		f.Res0.ObserveViolations++
		errs = append(errs, fmt.Sprintf("no \"no leader\" received within 30s of the last resignation (last: term %d, %q, closed %v)", l.token, l.value, l.closed))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	byToken := map[uint64]string{}
	var lastTerm uint64
	for _, g := range r.grants {
		if g.key == f.Key {
			byToken[g.token] = g.worker
			lastTerm = max(lastTerm, g.token)
		}
	}
	// The candidates whose campaign's node may outlive it (see above).
	dropping := map[string]bool{}
	if f.Target.Kind == backendZK {
		for _, a := range r.failed {
			if a.key == f.Key {
				dropping[a.worker] = true
			}
		}
	}
	// settling reports whether the leader at i, a term no grant has, is
	// on Redlock followed by the same candidate's grant with a higher
	// token, before any other granted term (see above).
	settling := func(i int) bool {
		if f.Target.Kind != backendRedlock {
			return false
		}
		l := o.leaders[i]
		for _, n := range o.leaders[i+1:] {
			if w, ok := byToken[n.token]; ok && n.token != 0 {
				return w == l.value && n.value == l.value && n.token > l.token
			}
		}
		return false
	}
	var (
		high        uint64
		seen        []string
		unknown     []uint64
		unsettled   []uint64
		sawLastTerm bool
	)
	for i, l := range o.leaders {
		switch {
		case l.closed:
			f.Res0.ObserveViolations++
			errs = append(errs, fmt.Sprintf("Observe's channel closed during the run, after %d leaders", i))
			continue
		case l.token == 0:
			continue
		case l.token < high:
			f.Res0.ObserveViolations++
			errs = append(errs, fmt.Sprintf("term %d (%s) after term %d", l.token, l.value, high))
		}
		high = max(high, l.token)
		sawLastTerm = sawLastTerm || l.token == lastTerm
		w, ok := byToken[l.token]
		switch {
		case l.value == "":
			f.Res0.ObserveViolations++
			errs = append(errs, fmt.Sprintf("term %d with no value", l.token))
		case !ok && dropping[l.value]:
			unknown = append(unknown, l.token)
		case !ok && settling(i):
			unsettled = append(unsettled, l.token)
		case !ok:
			f.Res0.ObserveViolations++
			errs = append(errs, fmt.Sprintf("term %d (%s) that no grant of the run has", l.token, l.value))
		case w != l.value:
			f.Res0.ObserveViolations++
			errs = append(errs, fmt.Sprintf("term %d with value %q, granted to %s", l.token, l.value, w))
		}
		if n := fmt.Sprintf("%d:%s", l.token, l.value); len(seen) == 0 || seen[len(seen)-1] != n {
			seen = append(seen, n)
		}
	}
	if !sawLastTerm {
		f.Res0.ObserveViolations++
		errs = append(errs, fmt.Sprintf("the last term, %d, never reported", lastTerm))
	}
	r.notes = append(r.notes, fmt.Sprintf("observer: %d of %d terms seen, in this order: %s", len(seen), len(byToken), strings.Join(seen, " ")))
	if len(unknown) > 0 {
		r.notes = append(r.notes, fmt.Sprintf("observer: terms %v that no grant of the run has, each with the value of a candidate whose campaign failed (its node not yet deleted)", unknown))
	}
	if len(unsettled) > 0 {
		r.notes = append(r.notes, fmt.Sprintf("observer: terms %v that no grant of the run has, each followed by the same candidate's grant with a higher token (reported while that grant's token was being settled)", unsettled))
	}
	for _, e := range errs {
		r.notes = append(r.notes, "observer error: "+e)
	}
}
