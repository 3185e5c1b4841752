package torture

import (
	"fmt"
	"iter"
	"net"
	"strings"
	"time"

	"github.com/distlock/distlock/testserver"
)

// Scenario is one fault, injected the same way in an unfenced and a fenced
// run on every backend it applies to.
type Scenario struct {
	Name    string
	Variant string // "" or what distinguishes two scenarios of one fault
	Title   string // what is done, in one line
	// Expect is, per backend kind, what the scenario must show; a backend
	// absent from it is not run (see Why).
	Expect map[string]Expect
	// Why explains, per backend kind, an ExpectNothing row or a backend
	// the scenario does not run on.
	Why map[string]string
	// Own is set when the scenario starts servers of its own instead of
	// using the shared one.
	Own bool
	// Election runs the scenario on an election instead of a lock: the
	// workers campaign (election.Campaign) in the election named by the
	// key, their writes carry the term's token, release resigns, and a
	// third process follows the leader with election.Observe.
	Election bool
	// Permit runs the scenario on a semaphore of limit 1 instead of a
	// lock: the workers' grants are permits (package semaphore), fenced
	// as locks are.
	Permit bool
	// RW runs the scenario on a read/write lock (package rwlock): the
	// workers' grants are its write locks, and read locks where a
	// scenario asks them (Acq.Shared).
	RW bool
	// BreaksTokens is set when the fault breaks the backend's promise of
	// increasing tokens (outside the deployment it documents as needed).
	BreaksTokens bool
	Run          func(f *Fixture) error
	// RunOn overrides Run for the backend kinds it names.
	RunOn map[string]func(f *Fixture) error
}

// ID is Name, or Name/Variant.
func (s Scenario) ID() string {
	if s.Variant == "" {
		return s.Name
	}
	return s.Name + "/" + s.Variant
}

// Scenarios are the fault scenarios, in report order.
var Scenarios = []Scenario{
	{
		Name:   "pause",
		Title:  "holder SIGSTOPped between its check and its write, past the TTL, until another holder has written; then SIGCONT: it writes with its old token",
		Expect: map[string]Expect{backendRedis: ExpectBite, backendEtcd: ExpectBite, backendFile: ExpectNothing},
		Why:    map[string]string{backendFile: "flock has no TTL: a stopped holder keeps the lock, so nobody else is granted during the pause (safe, but it blocks)"},
		Run:    pauseScenario,
	},
	{
		Name:   "delay",
		Title:  "a write delayed in a TCP proxy past the TTL; its sender times out and releases; the next holder writes; then the old write lands",
		Expect: map[string]Expect{backendRedis: ExpectBite, backendEtcd: ExpectBite, backendFile: ExpectBite},
		Run:    delayScenario,
	},
	{
		Name:   "partition",
		Title:  "holder cut off from the lock service (proxy blackhole); it keeps writing, ignoring its lock's context",
		Expect: map[string]Expect{backendRedis: ExpectBite, backendEtcd: ExpectBite},
		Why:    map[string]string{backendFile: "no network between a process and its kernel"},
		Run:    partitionScenario,
	},
	{
		Name: "holder-kill", Title: "holder process killed with SIGKILL while holding; the next holder is granted once the grant lapses",
		Expect: map[string]Expect{backendRedis: ExpectHold, backendEtcd: ExpectHold, backendFile: ExpectHold},
		Run:    holderKillScenario,
	},
	{
		Name: "server-kill", Variant: "no-fsync", Own: true, BreaksTokens: true,
		Title:  "Redis killed with SIGKILL while a lock is held, and restarted (default configuration: no persistence)",
		Expect: map[string]Expect{backendRedis: ExpectBite},
		Why:    map[string]string{backendEtcd: "see leader-kill", backendFile: "no server"},
		Run:    serverKillScenario(false),
	},
	{
		Name: "server-kill", Variant: "fsync", Own: true,
		Title:  "Redis killed with SIGKILL while a lock is held, and restarted (appendonly yes, appendfsync always)",
		Expect: map[string]Expect{backendRedis: ExpectHold},
		Why:    map[string]string{backendEtcd: "see leader-kill", backendFile: "no server"},
		Run:    serverKillScenario(true),
	},
	{
		Name: "leader-kill", Own: true,
		Title:  "leader of a 3-node etcd cluster killed with SIGKILL while a lock is held and another client waits",
		Expect: map[string]Expect{backendEtcd: ExpectHold},
		Why:    map[string]string{backendRedis: "see server-kill and failover", backendFile: "no server"},
		Run:    leaderKillScenario,
	},
	{
		Name: "failover", Variant: "missed-1", Own: true, BreaksTokens: true,
		Title:  "Redis primary killed after a grant that its replica never received (replication link cut); the replica is promoted and grants the key again",
		Expect: map[string]Expect{backendRedis: ExpectBite},
		Why:    map[string]string{backendEtcd: "consensus: see leader-kill", backendFile: "no server"},
		Run:    failoverScenario(1),
	},
	{
		Name: "failover", Variant: "missed-2", Own: true, BreaksTokens: true,
		Title:  "as missed-1, with two grants the replica never received",
		Expect: map[string]Expect{backendRedis: ExpectBite},
		Why:    map[string]string{backendEtcd: "consensus: see leader-kill", backendFile: "no server"},
		Run:    failoverScenario(2),
	},
	{
		Name: "late-release", Variant: "naive",
		Title:  "a holder paused past its TTL wakes up and releases with an unconditional delete (the guide's release without owner check)",
		Expect: map[string]Expect{backendRedis: ExpectBite, backendEtcd: ExpectBite},
		Why:    map[string]string{backendFile: "flock has no TTL: a paused holder never loses its lock"},
		Run:    lateReleaseScenario(true),
	},
	{
		Name: "late-release", Variant: "owner-checked",
		Title:  "a holder paused past its TTL wakes up and releases (distlock's owner-checked release)",
		Expect: map[string]Expect{backendRedis: ExpectHold, backendEtcd: ExpectHold},
		Why:    map[string]string{backendFile: "flock has no TTL: a paused holder never loses its lock"},
		Run:    lateReleaseScenario(false),
	},
	{
		Name: "lost-reply", Variant: "naive",
		Title:  "the reply to an acquire is lost (proxy drops replies): SET NX PX, once, no clean-up (the guide's first lock)",
		Expect: map[string]Expect{backendRedis: ExpectBite},
		Why:    map[string]string{backendEtcd: "no naive etcd lock built", backendFile: "no network"},
		Run:    lostReplyScenario(true, false),
	},
	{
		Name: "lost-reply", Variant: "distlock",
		Title:  "the reply to an acquire is lost (proxy drops replies): distlock's acquire",
		Expect: map[string]Expect{backendRedis: ExpectHold, backendEtcd: ExpectHold},
		Why:    map[string]string{backendFile: "no network"},
		Run:    lostReplyScenario(false, false),
	},
	{
		Name: "lost-reply", Variant: "distlock-no-retry",
		Title:  "the replies of the lock service are lost until an acquire with retries off has failed and given up (its clean-up cannot get through either)",
		Expect: map[string]Expect{backendRedis: ExpectHold, backendEtcd: ExpectHold},
		Why:    map[string]string{backendFile: "no network"},
		Run:    lostReplyScenario(false, true),
	},
}

// NotRun are the rows of scenarios and backends that exist in the design
// but not in this build.
var NotRun []struct{ Backend, Scenario, Why string }

func pauseScenario(f *Fixture) error {
	r := f.Run
	ws := f.Workers(map[string]WorkerConfig{"A": {}, "B": {}})
	a, b := ws["A"], ws["B"]
	for round := range f.rounds() {
		if err := f.Warm(a, b); err != nil {
			return err
		}
		if _, err := f.holdAfterReaders(a); err != nil {
			return err
		}
		if res := a.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
		ac := a.RMWAsync(f.Res, RMWOptions{Announce: true})
		if _, err := a.Announced(time.Minute); err != nil {
			return err
		}
		if err := a.Pause(); err != nil {
			return err
		}
		if err := a.Go(); err != nil {
			return err
		}
		// Past the TTL: until B is granted (and then writes). flock, and
		// a PostgreSQL session with no idle timeout, never grant B while
		// A lives: give up after a few TTLs there.
		wait := 2 * time.Minute
		if f.Target.holdsWhilePaused() {
			wait = 2 * f.P.TTL
		}
		bres, granted, err := waitGrant(bc, wait)
		if err != nil {
			return err
		}
		var rq []readerWait
		if granted {
			// Readers (of a read/write row) wait for B.
			rq = f.readersQueue()
			for range 2 {
				if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil || res.Outcome != writeOK {
					return fmt.Errorf("B's write during A's pause: %q %v", res.Outcome, res.Err)
				}
			}
			r.Injected()
		} else {
			r.Notef("round %d: B was not granted while A was stopped for %v (the grant has no TTL)", round, wait)
		}
		if err := a.Resume(); err != nil {
			return err
		}
		ares := <-ac
		if ares.Err != nil {
			return ares.Err
		}
		if granted {
			r.Notef("round %d: A (token %d) wrote after the pause, B holding token %d: %s", round, a.Holding(), bres.Token, ares.Outcome)
		} else {
			r.Notef("round %d: A (token %d) wrote after the pause, still holding its lock: %s", round, a.Holding(), ares.Outcome)
		}
		if granted && (f.Election || f.Permit) {
			// The term's (and the permit's) promise: it ends by its local
			// deadline, before the service elects another candidate
			// (grants the permit again). A's deadline as it stood when A
			// was stopped must come before B's Campaign (Acquire)
			// returned (both on the machine's wall clock), so before the
			// grant to B, which that return follows.
			ended := !ares.Deadline.IsZero() && ares.Deadline.Before(bres.Granted)
			if !ended {
				f.Res0.UnendedLateWrites++
			}
			what := "A's term's deadline came before B's Campaign returned"
			if f.Permit {
				what = "A's permit's deadline came before B's Acquire returned"
			}
			r.Notef("round %d: %s: %v (by %v; its context cancelled by the late write: %v)", round, what, ended, bres.Granted.Sub(ares.Deadline).Round(time.Millisecond), ares.DoneBefore)
		}
		if err := a.Release(); err != nil {
			r.Notef("round %d: A's release after the pause: %s", round, ErrKind(err))
		}
		if !granted {
			if bres, granted, err = waitGrant(bc, time.Minute); err != nil || !granted {
				return fmt.Errorf("B not granted after A's release: %v", err)
			}
			if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
		}
		if err := f.release(b); err != nil {
			return err
		}
		if err := f.readersFinish(rq); err != nil {
			return err
		}
	}
	return nil
}

// waitGrant waits up to d for an AcquireAsync result; granted is false on
// timeout, err set if the acquire failed.
func waitGrant(c <-chan AcquireResult, d time.Duration) (AcquireResult, bool, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case res := <-c:
		return res, res.Err == nil, res.Err
	case <-t.C:
		return AcquireResult{}, false, nil
	}
}

func delayScenario(f *Fixture) error {
	r := f.Run
	pa := r.Proxy(r.Store.Addr())
	ws := f.Workers(map[string]WorkerConfig{"A": {StoreVia: pa}, "B": {}})
	a, b := ws["A"], ws["B"]
	delay := f.P.TTL + time.Second
	for round := range f.rounds() {
		if err := f.Warm(a, b); err != nil {
			return err
		}
		if _, err := a.Acquire(f.Key, Acq{Wait: true}); err != nil {
			return err
		}
		if res := a.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
		ac := a.RMWAsync(f.Res, RMWOptions{Announce: true, StoreTimeout: 300 * time.Millisecond})
		if _, err := a.Announced(time.Minute); err != nil {
			return err
		}
		pa.Delay(delay)
		at := r.Fault("A", fmt.Sprintf("store link delayed by %v", delay))
		if err := a.Go(); err != nil {
			return err
		}
		ares := <-ac
		if ares.Err != nil {
			return ares.Err
		}
		r.Notef("round %d: A's write: %s (gave up after 300ms; released)", round, ares.Outcome)
		if err := f.release(a); err != nil {
			return err
		}
		if _, ok, err := waitGrant(bc, time.Minute); !ok {
			return fmt.Errorf("B not granted after A's release: %v", err)
		}
		for range 2 {
			if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
		}
		bDone := r.Clock.Now()
		if !Eventually(delay+time.Minute, func() bool { return r.wrote("A", at) }) {
			return fmt.Errorf("A's delayed write never reached the store")
		}
		if r.wroteBefore("A", at, bDone) {
			r.Notef("round %d: A's delayed write landed before B's writes were done", round)
		} else {
			r.Injected()
		}
		pa.Heal()
		if err := f.release(b); err != nil {
			return err
		}
	}
	return nil
}

// wrote reports whether the store recorded a write by worker that arrived
// after at.
func (r *Run) wrote(worker string, at int64) bool {
	for _, op := range r.Hist.Ops() {
		if op.Kind == KindWrite && op.Worker == worker && op.Call > at {
			return true
		}
	}
	return false
}

// wroteBefore reports whether worker's first write after at arrived before
// t.
func (r *Run) wroteBefore(worker string, at, t int64) bool {
	for _, op := range r.Hist.Ops() {
		if op.Kind == KindWrite && op.Worker == worker && op.Call > at {
			return op.Call < t
		}
	}
	return false
}

// waitEnded waits until the worker's current grant has been reported
// ended.
func (r *Run) waitEnded(w *Worker, d time.Duration) bool {
	return Eventually(d, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return w.current == nil || w.current.endAt > 0
	})
}

// maxAttempts bounds how often a round whose fault did not take effect is
// repeated.
const maxAttempts = 3

// rounds yields the round numbers of the Params. A round in which the fault
// did not take effect as designed (no call to Run.Injected) is repeated,
// up to maxAttempts times, unless the fault is not expected to apply.
func (f *Fixture) rounds() iter.Seq[int] {
	return func(yield func(int) bool) {
		for round := range f.P.Rounds {
			for attempt := 1; ; attempt++ {
				before := f.Run.effective()
				if !yield(round) {
					return
				}
				if f.Run.effective() > before || attempt == maxAttempts || f.Res0.Expect == ExpectNothing {
					break
				}
				f.Run.Notef("round %d: the fault did not take effect; repeating the round", round)
			}
		}
	}
}

func (r *Run) effective() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.injected
}

// Injected counts a round in which the fault took effect as designed.
func (r *Run) Injected() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.injected++
}

func (f *Fixture) lockAddr() string { return f.Target.addrs()[0] }

func partitionScenario(f *Fixture) error {
	r := f.Run
	pl := r.Proxy(f.lockAddr())
	ws := f.Workers(map[string]WorkerConfig{"A": {LockVia: pl}, "B": {}})
	return partitionRounds(f, ws["A"], ws["B"], pl.Blackhole, pl.Heal, "lock-service link blackholed")
}

// partitionRounds runs the partition rounds: cut cuts a off from the lock
// service (note says how, for the timeline), heal heals it.
func partitionRounds(f *Fixture, a, b *Worker, cut, heal func(), note string) error {
	r := f.Run
	for round := range f.rounds() {
		ta, err := f.warmThenHold(a, b)
		if err != nil {
			return err
		}
		bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
		cut()
		r.Fault("A", note)
		r.MarkFault(a)
		// A goes on working, paced, without looking at its lock.
		var bres AcquireResult
		deadline := time.Now().Add(2 * time.Minute)
	loop:
		for {
			select {
			case bres = <-bc:
				break loop
			default:
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("B not granted while A was cut off")
			}
			if res := a.RMW(f.Res, RMWOptions{NoCheck: true}); res.Err != nil {
				return res.Err
			}
			time.Sleep(50 * time.Millisecond) // the workload's pace
		}
		if bres.Err != nil {
			return bres.Err
		}
		// Readers (of a read/write row) wait for B.
		rq := f.readersQueue()
		// B holds the key; A, unaware, interleaves with it.
		v, err := a.Read(f.Res, true)
		if err != nil {
			return err
		}
		if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		out, err := a.Write(f.Res, v+1, true)
		if err != nil {
			return err
		}
		if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		r.Injected()
		r.Notef("round %d: A (token %d) cut off; B granted token %d; A's write after it: %s", round, ta, bres.Token, out)
		if !r.waitEnded(a, time.Minute) {
			return fmt.Errorf("A's lock context never ended")
		}
		heal()
		if err := a.Release(); err != nil {
			r.Notef("round %d: A's release after the heal: %s", round, ErrKind(err))
		}
		if err := f.release(b); err != nil {
			return err
		}
		if err := f.readersFinish(rq); err != nil {
			return err
		}
	}
	return nil
}

func holderKillScenario(f *Fixture) error {
	r := f.Run
	b := f.Worker("B", WorkerConfig{})
	for round := range f.rounds() {
		a := f.Worker(fmt.Sprintf("A%d", round+1), WorkerConfig{})
		ta, err := f.warmThenHold(a, b)
		if err != nil {
			return err
		}
		bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
		a.Kill()
		r.Fault(a.Name, "SIGKILL")
		bres, ok, err := waitGrant(bc, 2*time.Minute)
		if !ok {
			return fmt.Errorf("B not granted after A was killed: %v", err)
		}
		r.Injected()
		r.Notef("round %d: A killed holding token %d; B granted token %d", round, ta, bres.Token)
		if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		if err := f.release(b); err != nil {
			return err
		}
	}
	return nil
}

func serverKillScenario(fsync bool) func(f *Fixture) error {
	return func(f *Fixture) error {
		r := f.Run
		var opts []testserver.RedisOption
		if fsync {
			opts = append(opts, testserver.WithRedisAppendOnly())
		}
		srv := testserver.StartRedis(f.T, opts...)
		f.Target.Redis = srv
		// A long TTL and a renewal at TTL/2: A does not refresh (and learn
		// of the loss) in the second the restart takes.
		ttl := 6 * time.Second
		cfg := WorkerConfig{TTL: ttl, RenewEvery: ttl / 2}
		ws := f.Workers(map[string]WorkerConfig{"A": cfg, "B": cfg})
		a, b := ws["A"], ws["B"]
		for round := range f.rounds() {
			if err := f.Warm(a, b); err != nil {
				return err
			}
			ta, err := a.Acquire(f.Key, Acq{Wait: true})
			if err != nil {
				return err
			}
			if res := a.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
			srv.Kill()
			r.Fault("", "redis kill -9")
			r.MarkFault(a)
			srv.Restart(f.T)
			r.Fault("", "redis restarted")
			bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
			if !fsync {
				bres, ok, err := waitGrant(bc, time.Minute)
				if !ok {
					return fmt.Errorf("B not granted after the restart: %v", err)
				}
				r.Notef("round %d: A holds token %d; the restarted server granted B token %d", round, ta, bres.Token)
				if ok, err := interleave(f, a, b); err != nil {
					return err
				} else if ok {
					r.Injected()
				}
				if !r.waitEnded(a, time.Minute) {
					return fmt.Errorf("A's lock context never ended")
				}
				_ = a.Release()
			} else {
				if res := a.RMW(f.Res, RMWOptions{}); res.Err != nil {
					return res.Err
				}
				if err := a.Release(); err != nil {
					return fmt.Errorf("A's release after the restart: %w", err)
				}
				bres, ok, err := waitGrant(bc, time.Minute)
				if !ok {
					return fmt.Errorf("B not granted after A's release: %v", err)
				}
				r.Injected()
				r.Notef("round %d: A held token %d across the restart; B was granted token %d after A released", round, ta, bres.Token)
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

// interleave makes a and b, both believing they hold the lock, increment
// the resource with their reads and writes interleaved: a reads, b reads,
// a writes, b writes. Both check their lock before each step. It reports
// false when a's lock was no longer live at the start (the fault came too
// late to overlap).
func interleave(f *Fixture, a, b *Worker) (bool, error) {
	va, err := a.Read(f.Res, false)
	if ErrKind(err) == kindNotLive {
		f.Run.Notef("%s's lock had already ended: no overlap to show", a.Name)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	vb, err := b.Read(f.Res, false)
	if err != nil {
		return false, err
	}
	oa, err := a.Write(f.Res, va+1, false)
	if err != nil {
		return false, err
	}
	ob, err := b.Write(f.Res, vb+1, false)
	if err != nil {
		return false, err
	}
	f.Run.Notef("interleaved increments: %s's write %s, %s's write %s", a.Name, oa, b.Name, ob)
	return true, nil
}

func leaderKillScenario(f *Fixture) error {
	r := f.Run
	e := testserver.StartEtcdCluster(f.T, 3)
	f.Target.Etcd = e
	ttl := 2 * time.Second
	ws := f.Workers(map[string]WorkerConfig{"A": {TTL: ttl}, "B": {TTL: ttl}})
	a, b := ws["A"], ws["B"]
	for round := range f.rounds() {
		ta, err := f.warmThenHold(a, b)
		if err != nil {
			return err
		}
		bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
		leader := e.Leader(f.T)
		leader.Kill()
		r.Fault("", "etcd leader "+leader.Name+" kill -9")
		r.MarkFault(a)
		r.Injected()
		// A keeps working through the election, paced, checking its lock.
		var outs []string
		for range 4 {
			res := a.RMW(f.Res, RMWOptions{})
			if res.Err != nil && ErrKind(res.Err) != kindNotLive {
				return res.Err
			}
			outs = append(outs, res.Outcome)
			time.Sleep(ttl / 4) // the workload's pace
		}
		relErr := a.Release()
		bres, ok, err := waitGrant(bc, 2*time.Minute)
		if !ok {
			return fmt.Errorf("B not granted after the leader change: %v", err)
		}
		r.Notef("round %d: leader %s killed while A held token %d; A's writes during the election: %s; A's release: %v; B granted token %d",
			round, leader.Name, ta, strings.Join(outs, ","), relErr, bres.Token)
		if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		if err := f.release(b); err != nil {
			return err
		}
		leader.Restart(f.T)
		e.WaitHealthy(f.T)
	}
	return nil
}

func failoverScenario(missed int) func(f *Fixture) error {
	return func(f *Fixture) error {
		r := f.Run
		ttl := 3 * time.Second
		key, res := f.Key, f.Res
		for round := range f.rounds() {
			// Fresh servers, key and resource each round: the promoted
			// replica's counters start where replication stopped.
			f.Key, f.Res = fmt.Sprintf("%s/r%d", key, round+1), fmt.Sprintf("%s/r%d", res, round+1)
			primary := testserver.StartRedis(f.T)
			link := r.Proxy(primary.Addr)
			_, port, _ := net.SplitHostPort(link.Addr())
			replica := testserver.StartRedis(f.T, testserver.WithRedisConfig("replicaof 127.0.0.1 "+port))
			if !Eventually(30*time.Second, func() bool { return redisInfo(replica, "master_link_status") == "up" }) {
				return fmt.Errorf("replica never in sync")
			}
			urlOf := func(s *testserver.Redis) string { return Target{Kind: backendRedis, Redis: s}.URL() }
			an, bn := fmt.Sprintf("A%d", round+1), fmt.Sprintf("B%d", round+1)
			ws := f.Workers(map[string]WorkerConfig{
				an: {URL: urlOf(primary), TTL: ttl, RenewEvery: ttl / 2},
				bn: {URL: urlOf(replica), TTL: ttl, RenewEvery: ttl / 2},
			})
			a, b := ws[an], ws[bn]
			if err := f.Warm(a); err != nil {
				return err
			}
			if !Eventually(30*time.Second, func() bool {
				p, q := redisInfo(primary, "master_repl_offset"), redisInfo(replica, "slave_repl_offset")
				return p != "" && p == q
			}) {
				return fmt.Errorf("replica never caught up")
			}
			link.Blackhole()
			r.Fault("", "replication link cut: the replica lags")
			var ta uint64
			for i := range missed {
				if i > 0 {
					if err := f.release(a); err != nil {
						return err
					}
				}
				var err error
				if ta, err = a.Acquire(f.Key, Acq{Wait: true}); err != nil {
					return err
				}
				if res := a.RMW(f.Res, RMWOptions{}); res.Err != nil {
					return res.Err
				}
			}
			primary.Kill()
			r.Fault("", "primary kill -9")
			r.MarkFault(a)
			if _, err := replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
				return err
			}
			r.Fault("", "replica promoted (REPLICAOF NO ONE)")
			tb, err := b.Acquire(f.Key, Acq{Wait: false})
			if err != nil {
				return fmt.Errorf("B on the promoted replica: %w", err)
			}
			r.Notef("round %d: A holds token %d on the dead primary; the promoted replica granted B token %d", round, ta, tb)
			if ok, err := interleave(f, a, b); err != nil {
				return err
			} else if ok {
				r.Injected()
			}
			if err := f.release(b); err != nil {
				return err
			}
			if !r.waitEnded(a, time.Minute) {
				return fmt.Errorf("A's lock context never ended")
			}
		}
		return nil
	}
}

// redisInfo returns field of INFO replication of srv, "" if unknown.
func redisInfo(srv *testserver.Redis, field string) string {
	v, err := srv.Do("INFO", "replication")
	if err != nil {
		return ""
	}
	s, _ := v.(string)
	for _, line := range strings.Split(s, "\n") {
		if k, val, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return val
		}
	}
	return ""
}

func lateReleaseScenario(naive bool) func(f *Fixture) error {
	return func(f *Fixture) error {
		r := f.Run
		// B renews late (at 3/4 of its usable TTL), so that it does not
		// learn of a naive release in the few milliseconds the round takes
		// after it.
		ttl := 2 * time.Second
		ws := f.Workers(map[string]WorkerConfig{
			"A": {TTL: ttl},
			"B": {TTL: ttl, RenewEvery: 1500 * time.Millisecond},
			"C": {TTL: ttl},
		})
		a, b, c := ws["A"], ws["B"], ws["C"]
		for round := range f.rounds() {
			if err := f.Warm(a, b, c); err != nil {
				return err
			}
			ta, err := a.Acquire(f.Key, Acq{Wait: true})
			if err != nil {
				return err
			}
			if res := a.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
			bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
			if err := a.Pause(); err != nil {
				return err
			}
			bres, ok, err := waitGrant(bc, 2*time.Minute)
			if !ok {
				return fmt.Errorf("B not granted while A was paused: %v", err)
			}
			if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
			if err := a.Resume(); err != nil {
				return err
			}
			if naive {
				if err := a.NaiveRelease(f.Key); err != nil {
					return err
				}
			} else {
				err := a.Release()
				r.Fault("A", "late release")
				if ErrKind(err) != kindLost {
					return fmt.Errorf("A's late release: %v, want a lost lock", err)
				}
			}
			tc, err := c.Acquire(f.Key, Acq{Wait: false, NoRetry: true})
			switch {
			case err == nil:
				r.Injected()
				r.Notef("round %d: A (token %d) released late; C was granted token %d while B held token %d", round, ta, tc, bres.Token)
				if res := c.RMW(f.Res, RMWOptions{}); res.Err != nil {
					return res.Err
				}
				res := b.RMW(f.Res, RMWOptions{})
				if res.Err != nil && ErrKind(res.Err) != kindNotLive {
					return res.Err
				}
				r.Notef("round %d: B's write after C's grant: %s", round, res.Outcome)
				if err := f.release(c); err != nil {
					return err
				}
			case ErrKind(err) == kindNotAcquired:
				r.Injected()
				r.Notef("round %d: A (token %d) released late; C was refused while B held token %d", round, ta, bres.Token)
				if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
					return res.Err
				}
			default:
				return fmt.Errorf("C's try: %w", err)
			}
			if err := b.Release(); err != nil {
				r.Notef("round %d: B's release: %s", round, ErrKind(err))
			}
			if naive {
				_ = a.Release()
			}
		}
		return nil
	}
}

func lostReplyScenario(naive, noRetry bool) func(f *Fixture) error {
	return func(f *Fixture) error {
		r := f.Run
		pl := r.Proxy(f.lockAddr())
		// A long TTL: a grant orphaned by the lost reply would block the
		// key for that long.
		ttl := 10 * time.Second
		ws := f.Workers(map[string]WorkerConfig{"A": {LockVia: pl, TTL: ttl}, "B": {TTL: ttl}})
		a, b := ws["A"], ws["B"]
		for round := range f.rounds() {
			if err := f.Warm(a, b); err != nil {
				return err
			}
			if naive {
				if err := naiveLostReply(f, round, a, b, pl); err != nil {
					return err
				}
				continue
			}
			if err := lostReplyRound(f, round, a, b, pl, ttl, noRetry); err != nil {
				return err
			}
		}
		return nil
	}
}

// naiveLostReply: SET NX PX whose reply is lost leaves an orphan that
// blocks the key for its TTL.
func naiveLostReply(f *Fixture, round int, a, b *Worker, pl interface {
	DropReplies()
	Heal()
}) error {
	r := f.Run
	const naiveTTL = 2 * time.Second
	// A warm connection, so that the request is sent at once.
	if err := a.NaiveAcquire(f.Key+"/warm", time.Millisecond); err != nil {
		return err
	}
	pl.DropReplies()
	r.Fault("A", "lock-service replies dropped")
	err := a.NaiveAcquire(f.Key, naiveTTL)
	pl.Heal()
	r.Fault("A", "healed")
	_, held, herr := redisLockToken(f.Target.Redis, f.Key)
	if herr != nil {
		return herr
	}
	if err == nil {
		r.Notef("round %d: the naive acquire's reply was not lost", round)
		return nil
	}
	if held {
		f.Res0.Orphans++
		r.Injected()
	}
	start := r.Clock.Now()
	if _, err := b.Acquire(f.Key, Acq{Wait: true, Timeout: time.Minute}); err != nil {
		return err
	}
	r.Notef("round %d: A's SET NX took effect, its reply was lost (%v); the key was held by nobody until it expired: B waited %v",
		round, err, time.Duration(r.Clock.Now()-start).Round(time.Millisecond))
	if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
		return res.Err
	}
	return f.release(b)
}

// lostReplyRound drops the replies while A acquires, until the request is
// seen to take effect at the server; then heals and checks that the
// server holds no grant that nobody holds.
func lostReplyRound(f *Fixture, round int, a, b *Worker, pl interface {
	DropReplies()
	Heal()
}, ttl time.Duration, noRetry bool) error {
	r := f.Run
	before, err := f.grantMark()
	if err != nil {
		return err
	}
	pl.DropReplies()
	r.Fault("A", "lock-service replies dropped")
	ac := a.AcquireAsync(f.Key, Acq{Wait: true, NoRetry: noRetry, Timeout: time.Minute})
	var lostMark int64
	effective := Eventually(3*time.Second, func() bool {
		m, err := f.grantMark()
		lostMark = m
		return err == nil && m > before
	})
	var ares AcquireResult
	if noRetry {
		// Replies stay lost until the acquire has given up: its own
		// clean-up cannot reach the server either.
		ares = <-ac
		pl.Heal()
		r.Fault("A", "healed")
	} else {
		pl.Heal()
		r.Fault("A", "healed")
		ares = <-ac
	}
	if effective {
		r.Injected()
	} else {
		r.Notef("round %d: the acquire never reached the server while replies were dropped", round)
	}
	// No orphan: the server soon holds A's grant or nothing (well before
	// the grant's TTL, which would end an orphan on a TTL service).
	healed := r.Clock.Now()
	window := ttl * 6 / 10
	consistent := Eventually(window, func() bool {
		tok, held, err := f.serverHolder()
		if err != nil {
			return false
		}
		if ares.Err == nil {
			return held && tok == ares.Token
		}
		return !held
	})
	if effective {
		r.Notef("round %d: the server granted token %d to A's request and its reply was lost; A's acquire returned token %d, err %v", round, lostMark, ares.Token, ares.Err)
	}
	if consistent {
		r.Notef("round %d: %v after the heal the server held only what A held", round, time.Duration(r.Clock.Now()-healed).Round(time.Millisecond))
	} else {
		f.Res0.Orphans++
		tok, held, _ := f.serverHolder()
		r.Notef("round %d: orphan: %v after the heal the server still holds token %d (held %v) for nobody", round, window, tok, held)
	}
	if ares.Err == nil {
		if res := a.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		if err := f.release(a); err != nil {
			return err
		}
	} else if !consistent {
		// The documented way out: the next acquire of the key through
		// A's backend deletes what the failed one left.
		if _, err := a.Acquire(f.Key, Acq{Wait: true}); err != nil {
			return fmt.Errorf("A's next acquire: %w", err)
		}
		if err := f.release(a); err != nil {
			return err
		}
		r.Notef("round %d: A's next acquire of the key removed the orphan", round)
	}
	if _, err := b.Acquire(f.Key, Acq{Wait: true, Timeout: ttl / 2}); err != nil {
		return fmt.Errorf("B not granted within %v after A's lost reply: %w", ttl/2, err)
	}
	if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
		return res.Err
	}
	return f.release(b)
}

// grantMark returns a number that grows with every grant of the key at the
// server: the Redis token counter, or the highest create revision of the
// etcd lock keys.
func (f *Fixture) grantMark() (int64, error) {
	switch f.Target.Kind {
	case backendRedis:
		return redisInt(f.Target.Redis, RedisTokenKey(f.Key))
	case backendEtcd:
		revs, err := etcdKeys(f.Target.Etcd, f.Key)
		var m int64
		for _, r := range revs {
			m = max(m, r)
		}
		return m, err
	}
	return 0, fmt.Errorf("no grant mark for %s", f.Target.Kind)
}

// serverHolder returns the token of the grant the server holds for the key,
// if any. On etcd, several keys under the lock name count as held by the
// oldest, and a second key is reported as token 0.
func (f *Fixture) serverHolder() (uint64, bool, error) {
	switch f.Target.Kind {
	case backendRedis:
		return redisLockToken(f.Target.Redis, f.Key)
	case backendEtcd:
		revs, err := etcdKeys(f.Target.Etcd, f.Key)
		if err != nil || len(revs) == 0 {
			return 0, false, err
		}
		if len(revs) > 1 {
			return 0, true, nil
		}
		return uint64(revs[0]), true, nil
	}
	return 0, false, fmt.Errorf("no holder check for %s", f.Target.Kind)
}
