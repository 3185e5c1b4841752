package torture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/faultproxy"
	pt "github.com/distlock/distlock/partition"
)

// The partition rows: package partition's units under the partition fault
// of the lock rows. Each worker is a member of one group (named by the
// row's key) of memberUnits units, and writes, for every unit it owns,
// the resource of that unit (Fixture.Res, "-u", the unit's name) with the
// unit's token, paced: a fence per unit. A unit's grant is a grant of its
// lock key (partition/GROUP/units/UNIT), so the mutex and token models
// apply per unit unchanged, and the register per unit's resource. Unlike
// a lock row's workers, a member takes its grants on its own: the worker
// reports each as an event, and the harness stamps it on arrival, its
// call being when the member was started (a conservative interval).

// The group of the partition rows.
const (
	memberCount     = 4
	memberUnits     = 16
	memberReconcile = 250 * time.Millisecond
	memberMinHold   = 250 * time.Millisecond
	memberPace      = 100 * time.Millisecond // between a unit's writes
	// memberGrantBase numbers a member's unit grants apart from the
	// worker's acquisitions.
	memberGrantBase = 1 << 30
)

func init() {
	Scenarios = append(Scenarios, Scenario{
		Name: "partition", Variant: "member-partition",
		Title: fmt.Sprintf("package partition: %d members share %d units, each member writing each unit it owns with the unit's token (a fence per unit); one member is cut off from the service (proxy blackhole) and its units' writers go on writing, ignoring their contexts, after the other members took its units", memberCount, memberUnits),
		Expect: map[string]Expect{backendRedis: ExpectBite, backendRedlock: ExpectBite, backendEtcd: ExpectBite,
			backendZK: ExpectBite, backendGateway: ExpectBite},
		Why: map[string]string{
			backendRedlock: "the member is cut off from 3 of the 5 nodes",
			backendPG:      "a session cut off keeps its locks (see partition); not built in pglock's lease mode yet, as permit/partition and shared/writer-partition are (the plain exclusive partition row has no lease-mode variant yet either)",
			backendFile:    "no network between a process and its kernel",
		},
		Run:   memberPartitionScenario,
		RunOn: map[string]func(*Fixture) error{backendRedlock: redlockMemberPartitionScenario},
	})
	findings["partition/member-partition"] = "The cut-off member's unit contexts end by their locks' local deadlines before the service lets the unit locks lapse and the other members, which saw its member lock lapse, take its units (the mutex model of every unit holds, and every unit's tokens increase), but a unit writer that ignores its context keeps writing with its old unit's token: without a fence the store takes those writes after the new owner's; a fence per unit refuses every one."
}

func memberPartitionScenario(f *Fixture) error {
	pl := f.Run.Proxy(f.lockAddr())
	a := WorkerConfig{LockVia: pl}
	return memberPartitionRounds(f, a, pl.Blackhole, pl.Heal, "lock-service link blackholed")
}

func redlockMemberPartitionScenario(f *Fixture) error {
	addrs, ps := redlockVia(f.Run, f.Target.Redlock, 0, 1, 2)
	a := WorkerConfig{URL: redlockURL(addrs, "")}
	return memberPartitionRounds(f, a, eachProxy(ps, (*faultproxy.Proxy).Blackhole), eachProxy(ps, (*faultproxy.Proxy).Heal),
		"links to nodes 0, 1, 2 blackholed")
}

// memberPartitionRounds starts the members (A, configured by a, is the one
// cut off), and in each round waits for the group to settle, makes A's
// writers stubborn, cuts A off, waits until A has written late with its
// old token to every unit it held (after a newer owner's write), then
// ends A's writers and heals.
func memberPartitionRounds(f *Fixture, a WorkerConfig, cut, heal func(), note string) error {
	r := f.Run
	cfgs := map[string]WorkerConfig{"A": a}
	for i := 1; i < memberCount; i++ {
		cfgs[string(rune('A'+i))] = WorkerConfig{}
	}
	ws := f.Workers(cfgs)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range ws {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range names {
		if err := ws[n].Member(f.Key, f.Res); err != nil {
			return err
		}
	}
	wa := ws["A"]
	for round := range f.rounds() {
		if err := r.waitSettled(ws, 2*time.Minute); err != nil {
			return err
		}
		held := r.liveUnits(wa)
		if err := wa.Stubborn(true); err != nil {
			return err
		}
		cut()
		r.Fault("A", note)
		r.MarkFault(wa)
		// Every unit A held is taken by another member, which writes; A's
		// writer then writes with its old token (a stale write).
		late := map[string]bool{}
		ok := poll(2*time.Minute, func() bool {
			if err := r.memberErr(ws); err != nil {
				return true
			}
			for _, op := range r.Hist.Ops() {
				if op.Kind == KindWrite && op.Worker == "A" && op.Stale {
					late[op.Key] = true
				}
			}
			for _, u := range held {
				if !late[f.Res+"-u"+u] {
					return false
				}
			}
			return true
		})
		if err := r.memberErr(ws); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("round %d: A did not write late to each of its units %v within 2m (late: %v)", round, held, late)
		}
		r.Injected()
		if !poll(time.Minute, func() bool { return len(r.liveUnits(wa)) == 0 }) {
			return fmt.Errorf("round %d: A's unit contexts never ended", round)
		}
		r.Notef("round %d: A cut off holding units %v; each was taken by another member, and A's writer wrote late to each (after a newer owner's write)", round, held)
		if err := wa.Stubborn(false); err != nil {
			return err
		}
		heal()
	}
	// The group settles again with A back in it.
	return r.waitSettled(ws, 2*time.Minute)
}

// poll is Eventually at the pace of the members' writes: its conditions
// read the whole history.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(memberPace / 2)
	}
	return true
}

// waitSettled waits until every unit has one live grant (its end not
// reported) and every member holds memberUnits/memberCount of them.
func (r *Run) waitSettled(ws map[string]*Worker, d time.Duration) error {
	var last map[string]int
	ok := poll(d, func() bool {
		if r.memberErr(ws) != nil {
			return true
		}
		owned := map[string]int{}
		units := map[string]int{}
		r.mu.Lock()
		for _, w := range ws {
			for id, g := range w.grants {
				if id >= memberGrantBase && g.endAt == 0 {
					owned[w.Name]++
					units[g.key]++
				}
			}
		}
		r.mu.Unlock()
		last = owned
		if len(units) != memberUnits {
			return false
		}
		for _, n := range units {
			if n != 1 {
				return false
			}
		}
		for _, w := range ws {
			if owned[w.Name] != memberUnits/memberCount {
				return false
			}
		}
		return true
	})
	if err := r.memberErr(ws); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("the group did not settle within %v: live units per member %v", d, last)
	}
	return nil
}

// liveUnits returns the names of the units of w's live grants.
func (r *Run) liveUnits(w *Worker) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var us []string
	for id, g := range w.grants {
		if id >= memberGrantBase && g.endAt == 0 {
			us = append(us, g.key[len(unitKeyPrefix(g.key)):])
		}
	}
	slices.Sort(us)
	return us
}

// unitKeyPrefix returns key up to its unit name (its last "/").
func unitKeyPrefix(key string) string {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == '/' {
			return key[:i+1]
		}
	}
	return ""
}

// memberErr returns the first error a member's Run returned.
func (r *Run) memberErr(ws map[string]*Worker) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range ws {
		if w.memberErr != "" {
			return fmt.Errorf("member %s: partition.Run: %s\n%s", w.Name, w.memberErr, w.LogTail())
		}
	}
	return nil
}

// Member makes the worker a member of the group named group (package
// partition, memberUnits units): it writes, for each unit it owns, the
// resource res+"-u"+UNIT with the unit's token, until it exits.
func (w *Worker) Member(group, res string) error {
	w.run.mu.Lock()
	w.memberAt = w.run.Clock.Now()
	w.run.mu.Unlock()
	_, err := w.must(request{Cmd: cmdMember, Key: group, Resource: res, Units: memberUnits,
		Reconcile: memberReconcile, MinHold: memberMinHold, Timeout: time.Minute})
	return err
}

// Stubborn makes the member's unit writers ignore their contexts (on) and
// write with their unit's token, unchecked, until turned off, when each
// whose context has ended returns.
func (w *Worker) Stubborn(on bool) error {
	_, err := w.must(request{Cmd: cmdStubborn, Stubborn: on, Timeout: time.Minute})
	return err
}

// unitGranted records a unit's grant that a member reported.
func (r *Run) unitGranted(w *Worker, e reply, at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Err != "" {
		if w.memberErr == "" {
			w.memberErr = e.Err
		}
		return
	}
	g := &grantRec{id: len(r.grants) + 1, worker: w.Name, key: e.Key, token: e.Token, acqCall: w.memberAt, acqReturn: at, live: w.memberAt}
	r.grants = append(r.grants, g)
	w.grants[e.Grant] = g
	r.Hist.Add(Op{Worker: w.Name, Kind: KindAcquire, Key: g.key, Grant: g.id, Token: g.token, Call: g.acqCall, Return: at, Outcome: OutcomeOK,
		Note: "unit granted to the member (reported by it)"})
	if end, ok := w.ends[e.Grant]; ok {
		delete(w.ends, e.Grant)
		r.endLocked(w, g, end, w.endTime[e.Grant])
	}
}

// unitWrote records what a member's write for a unit proved.
func (r *Run) unitWrote(w *Worker, e reply) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.WriteSeq < 0 {
		return
	}
	if e.NoCheck {
		r.Hist.Update(e.WriteSeq, func(o *Op) { o.Naive = true })
	}
	if g := w.grants[e.Grant]; g != nil && e.LiveAfter {
		g.live = max(g.live, r.Hist.Get(e.WriteSeq).Return)
	}
}

// memberState is a worker's membership (cmdMember).
type memberState struct {
	cancel   context.CancelFunc
	done     chan struct{}
	stubborn atomic.Bool
	quit     chan struct{} // closed at the worker's close: every writer returns
	grants   atomic.Int64
}

// member starts the worker's membership of the group r.Key.
func (w *worker) member(r request) error {
	if w.members != nil {
		return errors.New("already a member")
	}
	p, err := pt.New(w.client, r.Key, pt.Count(r.Units), pt.WithMember(w.name),
		pt.WithReconcile(r.Reconcile), pt.WithMinHold(r.MinHold))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &memberState{cancel: cancel, done: make(chan struct{}), quit: make(chan struct{})}
	w.members = m
	go func() {
		defer close(m.done)
		err := p.Run(ctx, func(ctx context.Context, u pt.Unit) error {
			return w.unit(ctx, m, p.UnitKey(u.Name), r.Resource+"-u"+u.Name, u)
		})
		if ctx.Err() == nil {
			w.send(reply{Event: evUnit, Err: fmt.Sprint(err)})
		}
	}()
	return nil
}

// unit is a member's work for one owned unit: report the grant, then
// write the unit's resource with its token, paced, each write checked
// against the unit's lock unless the member is stubborn; return when the
// unit's context ends (when stubborn: once no longer stubborn).
func (w *worker) unit(ctx context.Context, m *memberState, key, res string, u pt.Unit) error {
	grant := memberGrantBase + int(m.grants.Add(1))
	w.send(reply{Event: evUnit, Key: key, Grant: grant, Token: u.Token})
	w.watches.Add(1)
	go func() {
		defer w.watches.Done()
		<-u.Lock.Done()
		err := u.Lock.Err()
		w.send(reply{Event: evEnd, Grant: grant, Cause: err.Error(), Lost: errors.Is(err, distlock.ErrLockLost)})
	}()
	sc := &storeClient{addr: w.store.addr, worker: w.name}
	defer sc.close()
	pace := time.NewTicker(memberPace)
	defer pace.Stop()
	for v := int64(1); ; v++ {
		stubborn := m.stubborn.Load()
		if !stubborn && (ctx.Err() != nil || !live(u.Lock)) {
			return nil
		}
		seq, _, err := sc.write(res, u.Token, v, 2*time.Second)
		if err != nil {
			seq = -1
		}
		w.send(reply{Event: evUnitWrite, Grant: grant, WriteSeq: seq, LiveAfter: live(u.Lock) && ctx.Err() == nil, NoCheck: stubborn})
		select {
		case <-m.quit:
			return nil
		case <-pace.C:
		}
	}
}

// stubborn turns the member's writers' stubbornness on or off.
func (w *worker) setStubborn(on bool) error {
	if w.members == nil {
		return errors.New("not a member")
	}
	w.members.stubborn.Store(on)
	return nil
}

// leave ends the membership and waits for it, a while at most.
func (w *worker) leave() {
	m := w.members
	if m == nil {
		return
	}
	w.members = nil
	m.stubborn.Store(false)
	close(m.quit)
	m.cancel()
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
	}
}
