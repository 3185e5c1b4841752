package torture

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

// zkSessionTimeout is the session timeout of every worker's ZooKeeper
// session, from which the lease of its locks is counted (zklock takes no
// TTL: five twelfths of the session timeout is the grants' validity). It
// is longer than the Params' TTL: a 1s session, pinged every third of it
// by a client on a loaded two-core machine where the servers are JVMs,
// expires now and then for no fault at all.
const zkSessionTimeout = 2 * time.Second

// zkURL is the zk:// URL of the servers at addrs.
func zkURL(addrs []string) string {
	return fmt.Sprintf("zk://%s/torture?session_timeout=%v&request_timeout=2s", strings.Join(addrs, ","), zkSessionTimeout)
}

// openZK opens a worker's zklock Backend.
func openZK(ctx context.Context, r request) (driver.Backend, io.Closer, error) {
	b, err := zklock.OpenURL(ctx, r.URL)
	if err != nil {
		return nil, nil, err
	}
	return b, b, nil
}

// The ZooKeeper rows: the shared faults where the generic scenarios apply
// as they are, a ZooKeeper leader kill, and the session expiry that only a
// session backend has.
func init() {
	addRow("pause", backendZK, ExpectBite, "", nil)
	addRow("delay", backendZK, ExpectBite, "", nil)
	addRow("partition", backendZK, ExpectBite, "", nil)
	addRow("holder-kill", backendZK, ExpectHold, "", nil)
	addRow("leader-kill", backendZK, ExpectHold, "3 servers; sessions move to the new leader, which restarts their timeouts, and the transaction log (forceSync) keeps the czxids", zkLeaderKillScenario)
	notRow("server-kill/no-fsync", backendZK, "see leader-kill")
	notRow("server-kill/fsync", backendZK, "see leader-kill")
	notRow("failover/missed-1", backendZK, "consensus: see leader-kill")
	notRow("failover/missed-2", backendZK, "consensus: see leader-kill")
	notRow("late-release/naive", backendZK, "no naive ZooKeeper release built")
	notRow("late-release/owner-checked", backendZK, "not run on ZooKeeper yet")
	notRow("lost-reply/naive", backendZK, "no naive ZooKeeper lock built")
	notRow("lost-reply/distlock", backendZK, "not run here: zklock's own tests drop a create's reply in a faultproxy and find the node again by its protected name")
	notRow("lost-reply/distlock-no-retry", backendZK, "not run here: see lost-reply/distlock")
	Scenarios = append(Scenarios, Scenario{
		Name:   "session-expiry",
		Title:  "holder cut off from ZooKeeper (proxy blackhole) past its session timeout, checking its lock before each write; the ensemble expires the session and grants the waiter; then the link heals",
		Expect: map[string]Expect{backendZK: ExpectHold},
		Why: map[string]string{
			backendZK:    "the holder's safe window (the last confirmation plus the validity, five twelfths of the session timeout, ×(1−drift) − margin, on its own clock) ends before the ensemble can expire the session",
			backendRedis: "no session: see partition", backendEtcd: "see partition (a lease is etcd's session)",
			backendFile: "no session", backendPG: "see connection-kill",
		},
		Run: sessionExpiryScenario,
	})
	findings["session-expiry"] = "The holder that checks its lock before each write stops writing when its safe window ends, on its own clock, before the ensemble expires its session and the waiter is granted (the mutex model holds; detection is about the validity, five twelfths of the session timeout, ×(1−drift) − margin). After the heal the client is told that the session expired, and the late release reports the lock lost."
	findings["leader-kill"] += " On ZooKeeper likewise: the sessions move to the new leader, and tokens (czxids, whose high 32 bits are the leader's epoch) keep increasing. The holder keeps its lock through the election only if a new leader answers its refresh within the lock's validity (5/12 of the session timeout: its refreshes are confirmed through the leader); with these 2s sessions (0.83s) it did not in the short run after that change: its writes during the election were refused as not live, its release found the lock lost, and the next worker was granted it."
}

// addRow adds kind's expectation to the scenario id; run, if not nil, runs
// it on kind instead of the scenario's Run; why is a remark on the row.
func addRow(id, kind string, e Expect, why string, run func(*Fixture) error) {
	sc := scenario(id)
	sc.Expect[kind] = e
	if why != "" {
		if sc.Why == nil {
			sc.Why = map[string]string{}
		}
		sc.Why[kind] = why
	}
	if run != nil {
		if sc.RunOn == nil {
			sc.RunOn = map[string]func(*Fixture) error{}
		}
		sc.RunOn[kind] = run
	}
}

// notRow says why the scenario id does not run on kind.
func notRow(id, kind, why string) {
	sc := scenario(id)
	if sc.Why == nil {
		sc.Why = map[string]string{}
	}
	sc.Why[kind] = why
}

// scenario returns the scenario id of Scenarios; it panics at init if
// there is none, a mistake in this package.
func scenario(id string) *Scenario {
	for i := range Scenarios {
		if Scenarios[i].ID() == id {
			return &Scenarios[i]
		}
	}
	panic("torture: no scenario " + id)
}

// sessionExpiryScenario cuts a well-behaved holder off until its session
// expires: the guard under test is that its lock's context ends (at the end
// of the safe window, on its own clock) before the ensemble expires the
// session and grants the waiter, so that a holder that looks before it
// writes never writes under a lock someone else holds. The partition and
// pause rows show the holder that does not look.
func sessionExpiryScenario(f *Fixture) error {
	r := f.Run
	pl := r.Proxy(f.lockAddr())
	ws := f.Workers(map[string]WorkerConfig{"A": {LockVia: pl}, "B": {}})
	a, b := ws["A"], ws["B"]
	for round := range f.rounds() {
		ta, err := f.warmThenHold(a, b)
		if err != nil {
			return err
		}
		bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
		pl.Blackhole()
		r.Fault("A", "ZooKeeper link blackholed")
		r.MarkFault(a)
		bres, written, refused, err := workUntilGranted(a, bc, f.Res)
		if err != nil {
			return err
		}
		if !r.waitEnded(a, time.Minute) {
			return fmt.Errorf("A's lock context never ended")
		}
		for range 2 {
			if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
		}
		r.Injected()
		pl.Heal()
		relErr := a.Release()
		r.Notef("round %d: A (token %d) cut off: %d increments written while its lock was live, %d refused by its own check after; B granted token %d; A's release after the heal: %s",
			round, ta, written, refused, bres.Token, errKindOrOK(relErr))
		if err := f.release(b); err != nil {
			return err
		}
	}
	return nil
}

// errKindOrOK names err's kind for a note, "ok" for nil.
func errKindOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	if k := ErrKind(err); k != "" {
		return k
	}
	return err.Error()
}

// zkLeaderKillScenario kills the leader of a 3-server ensemble while A
// holds the lock and B waits: the sessions move to the new leader, and no
// two hold the lock at once, nor do tokens (czxids) go back.
func zkLeaderKillScenario(f *Fixture) error {
	r := f.Run
	e := testserver.StartZooKeeperEnsemble(f.T, 3)
	f.Target.ZK = e
	ws := f.Workers(map[string]WorkerConfig{"A": {}, "B": {}})
	a, b := ws["A"], ws["B"]
	for round := range f.rounds() {
		ta, err := f.warmThenHold(a, b)
		if err != nil {
			return err
		}
		bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
		leader := e.Leader(f.T)
		leader.Kill()
		r.Fault("", fmt.Sprintf("zookeeper leader %d kill -9", leader.ID))
		r.MarkFault(a)
		r.Injected()
		// A keeps working through the election, paced, checking its lock.
		var outs []string
		for range 4 {
			res := a.RMW(f.Res, RMWOptions{})
			if res.Err != nil && ErrKind(res.Err) != kindNotLive {
				return res.Err
			}
			if res.Err != nil {
				res.Outcome = kindNotLive
			}
			outs = append(outs, res.Outcome)
			time.Sleep(zkSessionTimeout / 4) // the workload's pace
		}
		relErr := a.Release()
		bres, ok, err := waitGrant(bc, 2*time.Minute)
		if !ok {
			return fmt.Errorf("B not granted after the leader change: %v", err)
		}
		r.Notef("round %d: leader %d killed while A held token %d; A's writes during the election: %s; A's release: %s; B granted token %d",
			round, leader.ID, ta, strings.Join(outs, ","), errKindOrOK(relErr), bres.Token)
		if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		if err := f.release(b); err != nil {
			return err
		}
		leader.Restart(f.T)
		e.WaitReady(f.T)
	}
	return nil
}
