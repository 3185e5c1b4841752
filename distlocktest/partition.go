package distlocktest

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/partition"
)

// RunPartition runs the conformance suite of package partition against the
// backends newBackend returns, which must list holders (driver.Lister),
// with the options of Run (WithTTL, and WithRevoke for a backend whose
// grants do not lapse by themselves). Every member of a group is a
// Client over a Backend of its own, as another process has. The tests run
// one after another, each as a subtest; each logs the times its groups
// took to settle, against the bounds of the package documentation.
func RunPartition(t *testing.T, newBackend Factory, opts ...Option) {
	s := newSuite(newBackend, opts)
	s.runTests(t, []suiteTest{
		{"Group", s.testPartitionGroup},
		{"FrozenMemberFenced", s.testFrozenMemberFenced},
		{"PlannedMove", s.testPlannedMove},
		{"FnError", s.testPartitionFnError},
	})
}

// partReconcile is the reconcile interval of the suite's groups: short,
// so that the suite is quick, and no shorter than the backend's TTL
// makes useful.
func (s *suite) partReconcile() time.Duration {
	return min(max(s.ttl/4, 100*time.Millisecond), 250*time.Millisecond)
}

// partMinHold is the minimum hold of the suite's groups.
func (s *suite) partMinHold() time.Duration { return 2 * s.partReconcile() }

// partLimit is how long the suite waits for a group to settle where the
// package documentation bounds it by bound: a generous multiple, so that
// only a group that does not settle fails, never a slow machine. (A
// member's first reconcile sends an acquire for every unit at once; in
// pglock's session mode each opens a connection, and a loaded machine
// took 16s to open 64.)
func partLimit(bound time.Duration) time.Duration { return 20*bound + 30*time.Second }

// way is a member's way to the service, which the test can end for good
// as the death of the member's process does: from then on nothing of the
// member reaches the service (acquires, listings, refreshes and releases
// fail), and its grants end as the service ends a dead process's (by
// their TTL, or with its connections: see partGroup.kill).
type way struct {
	driver.Backend
	dead atomic.Bool

	mu   sync.Mutex
	held map[*wayLease]struct{} // grants not yet released
}

var (
	_ driver.Lister         = (*way)(nil)
	_ driver.BatchRefresher = (*way)(nil)
)

// errDead is what a dead member's calls fail with.
var errDead = fmt.Errorf("%w: distlocktest: the member's process died", distlock.ErrUnavailable)

// Acquire implements driver.Backend. A grant that comes back after the
// death is dropped: no process holds it, and the service ends it as it
// ends the member's others.
func (w *way) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if w.dead.Load() {
		return nil, errDead
	}
	l, err := w.Backend.Acquire(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	wl := &wayLease{Lease: l, w: w}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held[wl] = struct{}{}
	if w.dead.Load() {
		return nil, errDead
	}
	return wl, nil
}

// orphans returns the grants the member did not release: what the service
// still holds for it after its death.
func (w *way) orphans() []driver.Lease {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ls []driver.Lease
	for l := range w.held {
		ls = append(ls, l.Lease)
	}
	return ls
}

// List implements driver.Lister.
func (w *way) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	if w.dead.Load() {
		return nil, errDead
	}
	l, ok := w.Backend.(driver.Lister)
	if !ok {
		return nil, fmt.Errorf("distlocktest: %T cannot list: %w", w.Backend, errors.ErrUnsupported)
	}
	return l.List(ctx, prefix)
}

// RefreshAll implements driver.BatchRefresher, in one batch when the
// wrapped backend can batch.
func (w *way) RefreshAll(ctx context.Context, leases []driver.Lease, ttl time.Duration) []driver.RefreshResult {
	res := make([]driver.RefreshResult, len(leases))
	if w.dead.Load() {
		for i := range res {
			res[i].Err = errDead
		}
		return res
	}
	inner := make([]driver.Lease, len(leases))
	for i, l := range leases {
		inner[i] = l.(*wayLease).Lease
	}
	if br, ok := w.Backend.(driver.BatchRefresher); ok {
		return br.RefreshAll(ctx, inner, ttl)
	}
	for i, l := range inner {
		res[i].Validity, res[i].Err = l.Refresh(ctx, ttl)
	}
	return res
}

type wayLease struct {
	driver.Lease
	w *way
}

func (l *wayLease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if l.w.dead.Load() {
		return driver.Validity{}, errDead
	}
	return l.Lease.Refresh(ctx, ttl)
}

func (l *wayLease) Release(ctx context.Context) error {
	if l.w.dead.Load() {
		// A dead process releases nothing; its Client gives up at once
		// rather than retrying until the lease lapses.
		return fmt.Errorf("%w: distlocktest: the member's process died", distlock.ErrLockLost)
	}
	err := l.Lease.Release(ctx)
	if err == nil || errors.Is(err, distlock.ErrLockLost) || errors.Is(err, distlock.ErrNotHeld) {
		l.w.mu.Lock()
		delete(l.w.held, l)
		l.w.mu.Unlock()
	}
	return err
}

// partGroup is the members of one group, each over a Backend and Client
// of its own, an observer reading the group's assignment, and what the
// members' functions saw. Every member runs the same function (own): it
// checks that nobody else owns its unit, and writes through the unit's
// fence when granted and again when asked to give the unit up.
type partGroup struct {
	s     *suite
	t     *testing.T
	name  string
	units []string
	opts  []partition.Option
	reg   *fence.Register
	obs   *partition.Partition // reads the assignment; never runs

	mu       sync.Mutex // guards the fields below
	owning   map[string]*ownership
	running  map[*partMember]int // functions running, per member
	history  []*ownership        // every call of the function, in order
	backends []driver.Backend    // the members' backends, in the order they joined
	shared   bool                // the factory returns one Backend for all
	born     map[string]int      // incarnations per member id
}

// ownership is one call of a member's function for a unit.
type ownership struct {
	m       *partMember
	u       partition.Unit
	granted time.Time // when the function was called
	ended   time.Time // when it returned; zero until then
	cause   error     // the cause of its context's end
}

// partMember is one incarnation of a member: a process, with its own way
// to the service.
type partMember struct {
	id     string
	name   string // id#incarnation, for messages
	b      driver.Backend
	way    *way
	p      *partition.Partition
	fail   chan struct{} // a function that receives from it returns errFnFailed
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's result, once done is closed
}

var errFnFailed = errors.New("distlocktest: the unit's function failed")

// newPartGroup returns an empty group of units units; its members' locks
// have lockOpts.
func (s *suite) newPartGroup(t *testing.T, units int, lockOpts ...distlock.LockOption) *partGroup {
	t.Helper()
	g := &partGroup{
		s: s, t: t, name: strings.TrimPrefix(s.key(t), "distlocktest/"), units: partition.Count(units),
		opts: []partition.Option{
			partition.WithReconcile(s.partReconcile()),
			partition.WithMinHold(s.partMinHold()),
			partition.WithLockOptions(lockOpts...),
		},
		reg: fence.NewRegister(), owning: map[string]*ownership{}, running: map[*partMember]int{},
		born: map[string]int{},
	}
	p, err := partition.New(s.client(t), g.name, g.units, append(g.opts, partition.WithMember("observer"))...)
	if err != nil {
		t.Fatalf("partition.New: %v", err)
	}
	g.obs = p
	return g
}

// join starts a new incarnation of member id, over a Backend of its own.
func (g *partGroup) join(id string) *partMember {
	g.t.Helper()
	b := g.s.newBackend(g.t)
	w := &way{Backend: b, held: map[*wayLease]struct{}{}}
	c := g.s.clientOver(g.t, w)
	p, err := partition.New(c, g.name, g.units, append(g.opts, partition.WithMember(id))...)
	if err != nil {
		g.t.Fatalf("partition.New(%q): %v", id, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.mu.Lock()
	g.born[id]++
	m := &partMember{id: id, name: fmt.Sprintf("%s#%d", id, g.born[id]), b: b, way: w, p: p,
		fail: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	for _, other := range g.backends {
		if other == b {
			g.shared = true
		}
	}
	g.backends = append(g.backends, b)
	g.mu.Unlock()
	go func() {
		defer close(m.done)
		m.err = p.Run(ctx, func(ctx context.Context, u partition.Unit) error { return g.own(ctx, m, u) })
	}()
	g.t.Cleanup(func() { m.stop() }) // before its Client's Close
	return m
}

// stop ends the member's Run and returns its result.
func (m *partMember) stop() error {
	m.cancel()
	<-m.done
	return m.err
}

// own is every member's function: it checks, as it begins, that no other
// owner of the unit lives, writes through the unit's fence, and holds the
// unit until its context ends (or, asked to, fails); it then writes
// again, as an owner handing over does before it returns.
func (g *partGroup) own(ctx context.Context, m *partMember, u partition.Unit) error {
	o := g.enter(m, u)
	defer g.leave(o, ctx)
	g.write(o)
	select {
	case <-ctx.Done():
	case <-m.fail:
		return errFnFailed
	}
	g.write(o)
	return nil
}

// owns reports whether o's owner still owns its unit while its function
// runs: unless its lock was lost. A lost lock's function may still be on
// its way out (its context ended, and the service may grant the unit
// again: Err is exact on the local clock, ahead of the context); a lock
// released under a running function is a unit given up too early.
func (o *ownership) owns() bool {
	return !errors.Is(o.u.Lock.Err(), distlock.ErrLockLost)
}

// enter records o's beginning and checks that no other owner of its unit
// lives: a recorded owner, whose function has not returned, is a violation
// if it still owns the unit and the new owner does too.
func (g *partGroup) enter(m *partMember, u partition.Unit) *ownership {
	o := &ownership{m: m, u: u, granted: time.Now()}
	g.mu.Lock()
	defer g.mu.Unlock()
	if prev := g.owning[u.Name]; prev != nil && prev.owns() && o.owns() {
		g.t.Errorf("unit %s: %s granted token %d while %s owns it with live token %d", u.Name, m.name, u.Token, prev.m.name, prev.u.Token)
	}
	g.owning[u.Name] = o
	g.running[m]++
	g.history = append(g.history, o)
	return o
}

func (g *partGroup) leave(o *ownership, ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	o.ended, o.cause = time.Now(), context.Cause(ctx)
	if g.owning[o.u.Name] == o {
		delete(g.owning, o.u.Name)
	}
	g.running[o.m]--
}

// write writes as o's owner through the unit's fence: a write made while
// it owns the unit must be admitted. A refusal means a later grant's write
// came first, and the grant was made while this owner owned the unit if
// it still does after the refusal.
func (g *partGroup) write(o *ownership) {
	err := g.reg.Admit(o.u.Name, o.u.Token)
	if err != nil && o.owns() {
		g.t.Errorf("unit %s: the fence refused %s's write with live token %d: %v", o.u.Name, o.m.name, o.u.Token, err)
	}
}

// settle waits until the group is settled on exactly the members live:
// each unit held by the member it is planned to, whose function runs for
// it. It fails the test past limit, and returns the assignment and the
// time since start.
func (g *partGroup) settle(what string, live []*partMember, start time.Time, limit time.Duration) (partition.Assignment, time.Duration) {
	g.t.Helper()
	ctx := g.s.ctx(g.t)
	byID := map[string]*partMember{}
	var ids []string
	for _, m := range live {
		byID[m.id] = m
		ids = append(ids, m.id)
	}
	sort.Strings(ids)
	var (
		a       partition.Assignment
		err     error
		reasons string
	)
	for {
		a, err = g.obs.Assignment(ctx)
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			g.t.Fatalf("%s: Assignment: %v", what, err)
		case err != nil:
			reasons = err.Error()
		default:
			reasons = g.unsettled(a, ids, byID)
		}
		if reasons == "" {
			break
		}
		if time.Since(start) > limit {
			g.t.Fatalf("%s: not settled on %v within %v: %s", what, ids, limit, reasons)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(start)
	lo, hi, sum := len(g.units), 0, 0
	for _, m := range a.Members {
		lo, hi, sum = min(lo, m.Owned), max(hi, m.Owned), sum+m.Owned
	}
	if hi-lo > 1 || sum != len(g.units) {
		g.t.Errorf("%s: settled unbalanced: %d units owned, shares %d to %d: %+v", what, sum, lo, hi, a.Members)
	}
	return a, took
}

// unsettled says why a is not settled on the members ids, or "".
func (g *partGroup) unsettled(a partition.Assignment, ids []string, byID map[string]*partMember) string {
	var got []string
	for _, m := range a.Members {
		got = append(got, m.ID)
	}
	if !slices.Equal(got, ids) {
		return fmt.Sprintf("members %v", got)
	}
	if !a.Settled() {
		var off []string
		for _, u := range a.Units {
			if !u.Held || u.Owner != u.Planned {
				off = append(off, fmt.Sprintf("%s (planned to %s, held %v by %q)", u.Name, u.Planned, u.Held, u.Owner))
			}
		}
		return fmt.Sprintf("%d units not held by their planned member: %s", len(off), strings.Join(off[:min(len(off), 4)], ", "))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, u := range a.Units {
		if o := g.owning[u.Name]; o == nil || o.m != byID[u.Owner] {
			return fmt.Sprintf("unit %s: held by %s, whose function does not run for it", u.Name, u.Owner)
		}
	}
	return ""
}

// kill ends the processes of ms: first their ways to the service, at once;
// then each process. Where grants have a TTL, a dead member's functions
// run on until their locks' contexts end, which must happen before the
// service can grant their units elsewhere; the rest of the process is then
// stopped. Where grants have none, the functions are stopped at once.
// Last its Backend is closed, as the system closes a dead process's
// connections and files (unless the factory returns one shared Backend,
// whose grants then lapse by their TTL): a grant without a TTL ends only
// so, and a session whose client keeps it alive by itself ends only so;
// a grant without a TTL that the Close leaves held is released.
func (g *partGroup) kill(ms ...*partMember) {
	g.t.Helper()
	for _, m := range ms {
		m.way.dead.Store(true)
	}
	for _, m := range ms {
		if !g.s.unbounded {
			deadline := time.Now().Add(g.s.lapse())
			for g.runningOf(m) > 0 {
				if time.Now().After(deadline) {
					g.t.Fatalf("%s: %d functions still run %v after the process died", m.name, g.runningOf(m), g.s.lapse())
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		m.stop()
		g.mu.Lock()
		shared := g.shared
		g.mu.Unlock()
		if c, ok := m.b.(io.Closer); ok && !shared {
			c.Close()
		}
		if g.s.unbounded {
			// Grants without a TTL that the Backend's Close left held
			// (filelock keeps its files open until each lease's release)
			// end as the system ends a dead process's: at once.
			for _, l := range m.way.orphans() {
				l.Release(context.Background())
			}
		}
	}
}

func (g *partGroup) runningOf(m *partMember) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running[m]
}

// bounds of the package documentation for a group to settle: after a
// join, moving units from live members; after a leave, whose units are
// released; and after a death, waiting for its grants to end (at once
// where grants have no TTL and the dead member's connections close).
func (s *suite) joinBound() time.Duration  { return s.partReconcile()*5/4 + s.partMinHold() }
func (s *suite) leaveBound() time.Duration { return s.partReconcile() * 5 / 4 }
func (s *suite) deathBound() time.Duration {
	if s.unbounded {
		return s.partReconcile() * 5 / 4
	}
	return s.partReconcile()*5/4 + s.ttl
}

// stats formats settle times.
func stats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return fmt.Sprintf("%d, mean %v, max %v", len(ds), (sum / time.Duration(len(ds))).Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond))
}

// Contract: 8 members share 64 units while members join one by one, die
// (their ways to the service end for good: their locks lapse, or end with
// their connections), come back with the same id, and leave. Throughout, no unit
// has two live owners, and every owner's writes are admitted by the
// unit's fence. After each change, every unit is owned by its planned
// member within the bound of the package documentation (reconcile
// interval plus jitter, plus the minimum hold after a join or the TTL
// after a death, plus the time to be granted: measured and logged, and
// failed only at a generous multiple), and shares differ by one unit at
// most.
func (s *suite) testPartitionGroup(t *testing.T) {
	const members, rounds = 8, 3
	units := 64
	if s.partUnits > 0 {
		units = s.partUnits
	}
	g := s.newPartGroup(t, units, distlock.WithTTL(s.ttl))
	var (
		live                   []*partMember
		dead                   []string // ids
		joins, deaths, returns []time.Duration
	)
	for i := range members {
		start := time.Now()
		live = append(live, g.join(fmt.Sprintf("m%d", i)))
		_, took := g.settle(fmt.Sprintf("join of m%d", i), live, start, partLimit(s.joinBound()))
		joins = append(joins, took)
	}
	for round := range rounds {
		// One or two members die at once; at least two stay.
		n := 1 + mrand.IntN(2)
		mrand.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
		victims := slices.Clone(live[:n])
		live = live[n:]
		start := time.Now()
		g.kill(victims...)
		for _, v := range victims {
			dead = append(dead, v.id)
		}
		_, took := g.settle(fmt.Sprintf("round %d: death of %d", round, n), live, start, partLimit(s.deathBound()))
		deaths = append(deaths, took)

		// Some of the dead come back, with the same ids.
		mrand.Shuffle(len(dead), func(i, j int) { dead[i], dead[j] = dead[j], dead[i] })
		back := 1 + mrand.IntN(len(dead))
		start = time.Now()
		for _, id := range dead[:back] {
			live = append(live, g.join(id))
		}
		dead = dead[back:]
		_, took = g.settle(fmt.Sprintf("round %d: return of %d", round, back), live, start, partLimit(s.joinBound()))
		returns = append(returns, took)
	}
	// A member leaves: its Run ends, releasing its units, whose new owners
	// wait out no TTL.
	i := mrand.IntN(len(live))
	leaving := live[i]
	live = slices.Delete(live, i, i+1)
	start := time.Now()
	if err := leaving.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("%s's Run after its context ended: %v", leaving.name, err)
	}
	_, left := g.settle("a leave", live, start, partLimit(s.leaveBound()))
	for _, m := range live {
		if err := m.stop(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s's Run after its context ended: %v", m.name, err)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.owning) != 0 {
		t.Errorf("units still owned after every Run returned: %d", len(g.owning))
	}
	t.Logf("%d calls of the function; ttl %v, reconcile %v, min hold %v", len(g.history), s.ttl, s.partReconcile(), s.partMinHold())
	t.Logf("settled after a join in %s (bound %v plus grants)", stats(joins), s.joinBound())
	t.Logf("settled after a death in %s (bound %v plus grants)", stats(deaths), s.deathBound())
	t.Logf("settled after a return in %s (bound %v plus grants)", stats(returns), s.joinBound())
	t.Logf("settled after a leave in %v (bound %v plus grants)", left.Round(time.Millisecond), s.leaveBound())
}

// Contract: a member frozen past its TTL (its function ignores its
// context and blocks, and nothing of it reaches the service) has its
// unit's context ended before another member is granted the unit; when it
// wakes, it writes with its old Unit.Token. Without a fence that late
// write overwrites the new owner's (the baseline, which must bite); with
// one, it is refused.
func (s *suite) testFrozenMemberFenced(t *testing.T) {
	s.needLapse(t)
	ctx := s.ctx(t)
	g := s.newPartGroup(t, 1, distlock.WithTTL(s.ttl))
	const unit = "0"

	// The storage: a plain record, the last writer's, and a fenced one.
	var (
		mu            sync.Mutex
		plain, fenced string
	)
	reg := fence.NewRegister()
	write := func(token uint64, value string) error {
		mu.Lock()
		plain = value
		mu.Unlock()
		return reg.Do(unit, token, func() error {
			mu.Lock()
			fenced = value
			mu.Unlock()
			return nil
		})
	}
	read := func() (string, string) {
		mu.Lock()
		defer mu.Unlock()
		return plain, fenced
	}

	fa := NewFaulty(s.newBackend(t))
	pa, err := partition.New(s.clientOver(t, fa), g.name, g.units, append(g.opts, partition.WithMember("a"))...)
	if err != nil {
		t.Fatal(err)
	}
	owned := make(chan partition.Unit, 1)
	wake := make(chan struct{})
	late := make(chan error, 1)
	actx, stopA := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	var once sync.Once
	go func() {
		aDone <- pa.Run(actx, func(ctx context.Context, u partition.Unit) error {
			first := false
			once.Do(func() { first = true })
			if !first { // after the wake-up: a new term of a's
				<-ctx.Done()
				return nil
			}
			if err := write(u.Token, "a"); err != nil {
				late <- fmt.Errorf("a's first write: %w", err)
				return nil
			}
			owned <- u
			<-wake // frozen, deaf to its context
			late <- write(u.Token, "a, late")
			return nil
		})
	}()
	defer func() {
		stopA()
		if err := <-aDone; !errors.Is(err, context.Canceled) {
			t.Errorf("a's Run: %v", err)
		}
	}()
	var ua partition.Unit
	select {
	case ua = <-owned:
	case err := <-late:
		t.Fatal(err)
	case <-time.After(s.lapse()):
		t.Fatal("a did not own the unit")
	}
	defer close(wake) // if the test ends early
	// a freezes: nothing of it reaches the service any more.
	if s.unbounded {
		s.revoke(t, pa.UnitKey(unit))
		s.revoke(t, pa.MemberKey("a"))
	} else {
		fa.Partition()
	}

	b := g.join("b")
	deadline := time.After(s.lapse())
	var ob *ownership
	for ob == nil {
		g.mu.Lock()
		ob = g.owning[unit]
		g.mu.Unlock()
		select {
		case <-deadline:
			t.Fatalf("b was not granted the unit within %v of a's freeze", s.lapse())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if ob.m != b {
		t.Fatalf("unit owned by %s", ob.m.name)
	}
	if err := ua.Lock.Err(); err == nil {
		t.Errorf("b granted token %d while a's lock (token %d) lived", ob.u.Token, ua.Token)
	} else if !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("a's lock: %v, want ErrLockLost", err)
	}
	if ob.u.Token <= ua.Token {
		t.Fatalf("b's token %d after a's %d", ob.u.Token, ua.Token)
	}
	if err := write(ob.u.Token, "b"); err != nil {
		t.Fatalf("b's write: %v", err)
	}

	fa.Heal()
	wake <- struct{}{} // a wakes, and writes as the owner it was
	err = <-late
	p, f := read()
	if p != "a, late" {
		t.Errorf("unfenced late write left %q: the baseline should let it overwrite b's", p)
	}
	if !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("fenced late write: %v, want ErrStaleToken", err)
	}
	if f != "b" {
		t.Errorf("fenced record = %q, want b's", f)
	}
	if err := b.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("b's Run: %v", err)
	}
}

// Contract: a join moves units cooperatively: the old owner's function
// sees its context end with the cause ErrMoved, and may still write
// (its lock lives until it returns); the new owner is granted the unit
// as soon as it is released, without waiting out a TTL (the locks' TTL
// here is long, so that a wait for it would show), and the units that do
// not move keep their functions.
func (s *suite) testPlannedMove(t *testing.T) {
	const units = 8
	g := s.newPartGroup(t, units, distlock.WithTTL(held))
	start := time.Now()
	a := g.join("a")
	g.settle("a alone", []*partMember{a}, start, partLimit(s.joinBound()))
	start = time.Now()
	b := g.join("b")
	_, took := g.settle("b's join", []*partMember{a, b}, start, partLimit(s.joinBound()))

	g.mu.Lock()
	var gaps []time.Duration
	moved := 0
	for _, u := range g.units {
		var first, second *ownership
		for _, o := range g.history {
			if o.u.Name != u {
				continue
			}
			if first == nil {
				first = o
			} else if second == nil {
				second = o
			} else {
				t.Errorf("unit %s: a third owner, %s", u, o.m.name)
			}
		}
		switch {
		case first == nil || first.m != a:
			t.Errorf("unit %s: first owner %v, want a", u, first)
		case second == nil:
			if !first.ended.IsZero() {
				t.Errorf("unit %s: a's function ended (%v) and nobody owns the unit", u, first.cause)
			}
		case second.m != b:
			t.Errorf("unit %s: moved to %s", u, second.m.name)
		default:
			moved++
			if !errors.Is(first.cause, partition.ErrMoved) {
				t.Errorf("unit %s: a's context ended with %v, want ErrMoved", u, first.cause)
			}
			gaps = append(gaps, second.granted.Sub(first.ended))
		}
	}
	g.mu.Unlock()
	if moved == 0 {
		t.Fatal("b's join moved no unit")
	}
	slices.Sort(gaps)
	t.Logf("b's join moved %d of %d units, settled in %v; from the old function's return to the new grant: %s", moved, units, took, stats(gaps))
	if worst := gaps[len(gaps)-1]; worst > held/3 {
		t.Errorf("a moved unit was granted %v after its old owner returned: the move waited for the lock's TTL (%v)?", worst, held)
	}
	for _, m := range []*partMember{a, b} {
		if err := m.stop(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s's Run: %v", m.name, err)
		}
	}
}

// Contract: a function that returns an error ends its member's Run with
// that error, and every unit of the member is released: the member's
// grants end with Run (the locks' TTL here is long, so that a lapse would
// show), and another member takes the units.
func (s *suite) testPartitionFnError(t *testing.T) {
	const units = 8
	ctx := s.ctx(t)
	g := s.newPartGroup(t, units, distlock.WithTTL(held))
	start := time.Now()
	a, b := g.join("a"), g.join("b")
	g.settle("a and b", []*partMember{a, b}, start, partLimit(s.joinBound()))

	select {
	case a.fail <- struct{}{}:
	case <-time.After(s.lapse()):
		t.Fatal("no function of a's took the failure")
	}
	select {
	case <-a.done:
	case <-time.After(s.lapse()):
		t.Fatal("a's Run did not return after its function failed")
	}
	if !errors.Is(a.err, errFnFailed) {
		t.Errorf("a's Run = %v, want the function's error", a.err)
	}
	ended := time.Now()
	// Run has released a's locks: none is a's.
	deadline := time.Now().Add(pushBound)
	for {
		as, err := g.obs.Assignment(ctx)
		if err != nil {
			t.Fatalf("Assignment: %v", err)
		}
		var left []string
		for _, m := range as.Members {
			if m.ID == "a" {
				left = append(left, "its membership")
			}
		}
		for _, u := range as.Units {
			if u.Owner == "a" {
				left = append(left, "unit "+u.Name)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a still holds %v %v after its Run returned", left, pushBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, took := g.settle("b alone", []*partMember{b}, ended, held*2/3)
	t.Logf("b owned every unit %v after a's Run returned", took)
	if err := b.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("b's Run: %v", err)
	}
}
