package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Params sizes a run.
type Params struct {
	Rounds int // rounds of every measurement; subjects take turns in each

	LatencyOps      int // timed acquire+release cycles per subject and round
	LatencyCountOps int // cycles per subject whose requests are counted (untimed)

	ThroughputWorkers int           // goroutines, each on its own key
	ThroughputTime    time.Duration // per subject and round

	ContentionWaiters []int         // goroutines (each its own instance) on one key
	ContentionGrants  int           // grants per run, shared equally by the goroutines
	ContentionRounds  int           // rounds of the contention measurements
	ContentionLimit   time.Duration // a run still going after this is stopped and reported incomplete
	Hold              time.Duration // how long each holder keeps the lock

	HeldSizes  []int         // numbers of locks held at once
	HeldTTL    time.Duration // lock TTL while held (renewal every TTL/3)
	HeldWindow time.Duration // how long renewals are counted

	ElectionCandidates int // candidates (each its own instance) of one election
	ElectionTerms      int // terms per subject and round

	SemaphoreLimit   int // permits of the semaphore measurement's semaphores
	SemaphoreWorkers int // goroutines (each its own instance) sharing SemaphoreLimit permits; 0: no contended rounds

	CLIRuns int // runs of each command of the CLI measurement, interleaved; 0: not measured
}

// FullParams is the run that produces RESULTS.md.
var FullParams = Params{
	Rounds:            8,
	LatencyOps:        250,
	LatencyCountOps:   100,
	ThroughputWorkers: 64,
	ThroughputTime:    500 * time.Millisecond,
	ContentionWaiters: []int{16, 64},
	ContentionGrants:  640,
	ContentionRounds:  3,
	ContentionLimit:   2 * time.Minute,
	Hold:              time.Millisecond,
	HeldSizes:         []int{1_000, 10_000},
	HeldTTL:           3 * time.Second,
	HeldWindow:        3 * time.Second,

	ElectionCandidates: 4,
	ElectionTerms:      100,

	SemaphoreLimit:   4,
	SemaphoreWorkers: 8,

	CLIRuns: 50,
}

// SmokeParams is the run of `go test ./...`: every code path, in seconds.
var SmokeParams = Params{
	Rounds:            1,
	LatencyOps:        20,
	LatencyCountOps:   5,
	ThroughputWorkers: 8,
	ThroughputTime:    100 * time.Millisecond,
	ContentionWaiters: []int{4},
	ContentionGrants:  20,
	ContentionRounds:  1,
	ContentionLimit:   20 * time.Second,
	Hold:              time.Millisecond,
	HeldSizes:         []int{10, 50},
	HeldTTL:           3 * time.Second,
	HeldWindow:        1100 * time.Millisecond,

	ElectionCandidates: 3,
	ElectionTerms:      10,

	SemaphoreLimit:   2,
	SemaphoreWorkers: 4,

	CLIRuns: 3,
}

// Results are what a run measured, by subject ID.
type Results struct {
	Params     Params
	Started    time.Time
	Elapsed    time.Duration
	Latency    map[string]*LatencyResult
	Throughput map[string]*ThroughputResult
	Contention map[int]map[string]*ContentionResult // by number of waiters
	Held       map[string][]*HeldResult
	Election   map[string]*ElectionResult
	Semaphore  map[string]*SemaphoreResult // nil in results that predate the measurement
	CLI        *CLIResult                  // nil in results that predate the measurement or with CLIRuns 0
	IdleRTT    map[string][]time.Duration  // round trips after Hold of idleness, by round-trip subject, sorted
	Versions   map[string]string
}

// LatencyResult is the uncontended measurement of one subject.
type LatencyResult struct {
	Samples []time.Duration // one per timed cycle, sorted
	Delta   Snapshot        // counters over Counted cycles (not the timed ones)
	Counted int
	// Turns are the timed cycles in the order they were taken: the i-th
	// of each subject of a service came from the same turn, which took
	// the service's subjects one after the other in an order drawn at
	// random (see pairedRatio). Nil in results that predate them.
	Turns []time.Duration
}

// ThroughputResult is the distinct-keys measurement of one subject.
type ThroughputResult struct {
	Cycles   int64
	Elapsed  time.Duration
	PerRound []float64 // cycles per second
}

// ContentionResult is the one-key measurement of one subject.
type ContentionResult struct {
	Waiters    int
	Grants     int             // grants in all rounds
	Handoffs   int             // grants to another waiter than the previous holder
	Total      time.Duration   // wall time of all rounds, first request to last release
	HoldTotal  time.Duration   // time the lock was held, over all grants
	Gaps       []time.Duration // release call to the next grant, sorted
	HandoffGap []time.Duration // the same, for grants to another waiter only, sorted
	Fairness   []float64       // per round: max/min grants per waiter when the first waiter finished its share (-1: a waiter had none)
	Starved    int             // waiters without a grant when the first finished, over all rounds
	Overtakes  int             // times a waiter was passed by one that asked after it (see overtakes), over all rounds
	Delta      Snapshot        // counters over all rounds
	Violations int             // times two holders overlapped
	Incomplete int             // rounds stopped at ContentionLimit
	Errors     []string        // unexpected errors (at most a few)
}

// Waste is the time per hand-off that the lock was not held:
// (total - hold time) / hand-offs, where a hand-off is a grant to another
// waiter than the previous holder. A library that gives the lock back to
// the goroutine that just released it makes few hand-offs, each after a
// long idle time: that is what its waiters wait.
func (c *ContentionResult) Waste() time.Duration {
	if c.Handoffs == 0 {
		return 0
	}
	return (c.Total - c.HoldTotal) / time.Duration(c.Handoffs)
}

// WastePerGrant is (total - hold time) / grants, counting a grant back to
// the releaser as a hand-off too.
func (c *ContentionResult) WastePerGrant() time.Duration {
	if c.Grants == 0 {
		return 0
	}
	return (c.Total - c.HoldTotal) / time.Duration(c.Grants)
}

// HeldResult is the held-locks measurement of one distlock backend.
type HeldResult struct {
	Locks        int
	Goroutines   int     // goroutines running distlock code (Client and backend package), while all are held
	HeapPerLock  float64 // bytes of live heap per held lock (the caller's *Lock included)
	Delta        Snapshot
	Window       time.Duration
	Renewed      int64 // leases refreshed in the window
	BatchCalls   int64 // RefreshAll calls in the window
	SingleCalls  int64 // Lease.Refresh calls in the window
	Lost         int
	AcquireTime  time.Duration
	RequestsPerS float64
}

// Runner runs the measurements on one Env.
type Runner struct {
	tb       testing.TB
	env      *Env
	p        Params
	subjects []Subject
	logf     func(format string, args ...any)
	idle     map[string][]time.Duration
	// roundDone, when set, is given every contention round's grants,
	// sorted by acquisition (for diagnostics of the order of grants).
	roundDone func(s Subject, n int, holds []holdRecord)
}

// NewRunner returns a Runner of subjects with parameters p.
func NewRunner(tb testing.TB, env *Env, p Params, subjects []Subject) *Runner {
	return &Runner{tb: tb, env: env, p: p, subjects: subjects, logf: tb.Logf, idle: map[string][]time.Duration{}}
}

// Run takes every measurement.
func (r *Runner) Run(ctx context.Context) *Results {
	res := &Results{Params: r.p, Started: time.Now(),
		Contention: map[int]map[string]*ContentionResult{}}
	res.Latency = r.latency(ctx)
	res.Throughput = r.throughput(ctx)
	for _, n := range r.p.ContentionWaiters {
		res.Contention[n] = r.contention(ctx, n)
	}
	for _, d := range r.idle {
		slices.Sort(d)
	}
	res.IdleRTT = r.idle
	res.Held = r.held(ctx)
	res.Election = r.elections(ctx)
	res.Semaphore = r.semaphores(ctx)
	if r.p.CLIRuns > 0 {
		res.CLI = r.cli(ctx, r.p.CLIRuns, "")
	}
	res.Versions = r.env.Versions(ctx)
	res.Elapsed = time.Since(res.Started)
	return res
}

func (r *Runner) with(m Measure) []Subject {
	var out []Subject
	for _, s := range r.subjects {
		if s.Has(m) {
			out = append(out, s)
		}
	}
	return out
}

// rotated returns subs starting at index round (mod len), so that each
// subject runs first, last and between the others in turn.
func rotated(subs []Subject, round int) []Subject {
	if len(subs) == 0 {
		return nil
	}
	k := round % len(subs)
	return append(slices.Clone(subs[k:]), subs[:k]...)
}

// turnOrders returns the source of a measurement's turn orders (see
// shuffled): seeded, so that a run repeats the orders of the one before.
func turnOrders() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// shuffled returns the elements of s in an order drawn from rng: a turn
// of cycles taken one right after the other (see latency).
func shuffled[T any](rng *rand.Rand, s []T) []T {
	order := slices.Clone(s)
	rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	return order
}

func keyFor(s Subject, k string) string { return "bench:" + s.ID + ":" + k }

func (r *Runner) open(s Subject) Locker {
	r.tb.Helper()
	l, err := s.Open(r.env)
	if err != nil {
		r.tb.Fatalf("%s: open: %v", s.Name, err)
	}
	return l
}

func (r *Runner) closeLocker(s Subject, l Locker) {
	r.tb.Helper()
	if err := l.Close(); err != nil {
		r.tb.Errorf("%s: close: %v", s.Name, err)
	}
}

func (r *Runner) counters(ctx context.Context, s Subject) Snapshot {
	r.tb.Helper()
	if s.Counters == nil {
		return Snapshot{ByName: map[string]int64{}}
	}
	snap, err := s.Counters(ctx, r.env)
	if err != nil {
		r.tb.Fatalf("%s: read counters: %v", s.Name, err)
	}
	return snap
}

func addSnap(a, b Snapshot) Snapshot {
	return Snapshot{Requests: a.Requests + b.Requests, Ops: a.Ops + b.Ops, ServerMicros: a.ServerMicros + b.ServerMicros,
		ByName: addMap(a.ByName, b.ByName), RequestsByName: addMap(a.RequestsByName, b.RequestsByName),
		UsecByName: addMap(a.UsecByName, b.UsecByName)}
}

func addMap(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range a {
		out[k] += v
	}
	for k, v := range b {
		out[k] += v
	}
	return out
}

// latency measures uncontended acquire+release cycles, one goroutine, one
// key per subject. One instance per subject serves every round.
func (r *Runner) latency(ctx context.Context) map[string]*LatencyResult {
	subs := r.with(Latency)
	lockers := map[string]Locker{}
	out := map[string]*LatencyResult{}
	for _, s := range subs {
		lockers[s.ID] = r.open(s)
		out[s.ID] = &LatencyResult{}
		defer r.closeLocker(s, lockers[s.ID])
	}
	cycle := func(s Subject) time.Duration {
		t0 := time.Now()
		u, err := lockers[s.ID].Lock(ctx, keyFor(s, "latency"))
		if err == nil {
			err = u(ctx)
		}
		d := time.Since(t0)
		if err != nil {
			r.tb.Fatalf("%s: latency cycle: %v", s.Name, err)
		}
		return d
	}
	for _, s := range subs { // warm up: connections, script caches, sessions
		for range 10 {
			cycle(s)
		}
	}
	// Requests per cycle, in a pass of its own: reading the counters
	// between timed cycles would disturb them.
	for _, s := range subs {
		before := r.counters(ctx, s)
		for range r.p.LatencyCountOps {
			cycle(s)
		}
		out[s.ID].Delta = r.counters(ctx, s).Sub(before)
		out[s.ID].Counted = r.p.LatencyCountOps
	}
	// Timed cycles, one subject after another in turns, so that a burst of
	// noise on the machine falls on all of them alike. Each turn takes the
	// subjects in an order of its own, drawn at random (seeded, so that
	// runs repeat it): what a cycle leaves behind (garbage to collect,
	// goroutines finishing) falls on whichever subject comes next, and in
	// a rotation every subject but the first of a turn would follow the
	// same one each time (a cycle right after redsync's took about 30 µs
	// more at p10).
	// Turns are taken within a service: a cycle on another service (an
	// etcd write takes milliseconds) would leave this service's server idle
	// long enough for its next request to pay for waking the machine up.
	rng := turnOrders()
	var groups [][]Subject
	for _, s := range subs {
		if n := len(groups); n > 0 && groups[n-1][0].Service == s.Service {
			groups[n-1] = append(groups[n-1], s)
		} else {
			groups = append(groups, []Subject{s})
		}
	}
	for round := range r.p.Rounds {
		for _, g := range groups {
			for range r.p.LatencyOps {
				for _, s := range shuffled(rng, g) {
					d := cycle(s)
					out[s.ID].Samples = append(out[s.ID].Samples, d)
					out[s.ID].Turns = append(out[s.ID].Turns, d)
				}
			}
		}
		r.logf("latency: round %d/%d done", round+1, r.p.Rounds)
	}
	for _, lr := range out {
		slices.Sort(lr.Samples)
	}
	return out
}

// throughput measures cycles per second of ThroughputWorkers goroutines of
// one instance, each on a key of its own.
func (r *Runner) throughput(ctx context.Context) map[string]*ThroughputResult {
	subs := r.with(Throughput)
	out := map[string]*ThroughputResult{}
	for _, s := range subs {
		out[s.ID] = &ThroughputResult{}
	}
	for round := range r.p.Rounds {
		for _, s := range rotated(subs, round) {
			l := r.open(s)
			var (
				cycles  atomic.Int64
				stop    atomic.Bool
				errOnce sync.Once
				firstEr error
				wg      sync.WaitGroup
			)
			start := time.Now()
			timer := time.AfterFunc(r.p.ThroughputTime, func() { stop.Store(true) })
			for g := range r.p.ThroughputWorkers {
				key := keyFor(s, "tp/"+strconv.Itoa(g))
				wg.Go(func() {
					for { // at least one cycle each, however short the run
						u, err := l.Lock(ctx, key)
						if err == nil {
							err = u(ctx)
						}
						if err != nil {
							errOnce.Do(func() { firstEr = err })
							stop.Store(true)
							return
						}
						cycles.Add(1)
						if stop.Load() {
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			timer.Stop()
			r.closeLocker(s, l)
			if firstEr != nil {
				r.tb.Fatalf("%s: throughput: %v", s.Name, firstEr)
			}
			tr := out[s.ID]
			tr.Cycles += cycles.Load()
			tr.Elapsed += elapsed
			tr.PerRound = append(tr.PerRound, float64(cycles.Load())/elapsed.Seconds())
		}
		r.logf("throughput: round %d/%d done", round+1, r.p.Rounds)
	}
	return out
}

type holdRecord struct {
	g        int
	asked    time.Time // when the Lock call that got this grant started
	acquired time.Time
	released time.Time // when the release call started
}

// contention runs n goroutines, each with an instance of its own (a
// process), competing for one key until each has been granted it
// ContentionGrants/n times; each holds it for Hold and asks again at once.
// A fixed share per goroutine keeps a library that lets the releaser take
// the lock straight back from looking fast: the others still have to get
// their share.
func (r *Runner) contention(ctx context.Context, n int) map[string]*ContentionResult {
	subs := r.with(Contention)
	out := map[string]*ContentionResult{}
	for _, s := range subs {
		out[s.ID] = &ContentionResult{Waiters: n}
	}
	for round := range r.p.ContentionRounds {
		r.idleRTT(ctx, 100)
		for _, s := range rotated(subs, round) {
			r.contentionRound(ctx, s, n, out[s.ID])
		}
		r.logf("contention %d: round %d/%d done", n, round+1, r.p.ContentionRounds)
	}
	for _, cr := range out {
		slices.Sort(cr.Gaps)
		slices.Sort(cr.HandoffGap)
	}
	return out
}

// idleRTT measures each service's round trip the way a hand-off meets it:
// after the client has been idle for Hold (a holder's work), when the
// machine's cores may have gone to sleep. On a virtual machine that costs
// several times a round trip sent back to back.
func (r *Runner) idleRTT(ctx context.Context, samples int) {
	for _, s := range r.with(Latency) {
		if s.Kind != KindRoundTrip {
			continue
		}
		l := r.open(s)
		for range samples {
			time.Sleep(r.p.Hold)
			t0 := time.Now()
			if _, err := l.Lock(ctx, keyFor(s, "idle")); err != nil {
				r.tb.Fatalf("%s: %v", s.Name, err)
			}
			r.idle[s.ID] = append(r.idle[s.ID], time.Since(t0))
		}
		r.closeLocker(s, l)
	}
}

func (r *Runner) contentionRound(ctx context.Context, s Subject, n int, cr *ContentionResult) {
	// lockers[n] is the gate: an instance that holds the key while the
	// others ask for it, at the start of the measured run (see below).
	all := make([]Locker, n+1)
	for i := range all {
		all[i] = r.open(s)
	}
	defer func() {
		for _, l := range all {
			r.closeLocker(s, l)
		}
	}()
	lockers, gate := all[:n], all[n]
	// Connections, sessions and subscriptions are made before the
	// counters are read: a process that starts pays for them once, not
	// per hand-off. Each instance asks again as soon as it released, as
	// in the run: a release that returns once a majority decided it
	// (Redlock) leaves a node's request under way, and the next request
	// to that node takes a second connection of its pool.
	err := parallel(16, n+1, func(i int) error {
		for range 2 {
			u, err := all[i].Lock(ctx, keyFor(s, "warm/"+strconv.Itoa(i)))
			if err == nil {
				err = u(ctx)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		r.tb.Fatalf("%s: warm-up: %v", s.Name, err)
	}
	key := keyFor(s, "handoff/"+strconv.Itoa(n))
	share := max(1, r.p.ContentionGrants/n)
	runCtx, cancel := context.WithTimeout(ctx, r.p.ContentionLimit)
	defer cancel()
	// A process subscribes to a key's release channel when it first finds
	// the key held (redislock: a pub/sub connection, its SUBSCRIBE and a
	// try once it is confirmed), and keeps the subscription while the key
	// stays contended. So every goroutine waits for the key once, then
	// holds it for Hold, before the counters are read: like the
	// connections above, that is paid once per process, not per hand-off.
	// A goroutine that found the key free would not have waited (nor, with
	// redislock's queue, one that found it free between two hand-offs
	// while the others were still subscribing), so lockers[0] holds it
	// until every other goroutine has asked, and then asks once more while
	// lockers[1] holds it.
	if n > 1 {
		err = r.gated(runCtx, ctx, lockers[0], key, n-1, func(i int) error {
			u, err := lockers[i+1].Lock(runCtx, key)
			if err == nil {
				time.Sleep(r.p.Hold)
				err = u(ctx)
			}
			return err
		})
		if err == nil {
			err = r.gated(runCtx, ctx, lockers[1], key, 1, func(int) error {
				u, err := lockers[0].Lock(runCtx, key)
				if err == nil {
					err = u(ctx)
				}
				return err
			})
		}
	}
	if err != nil {
		r.tb.Fatalf("%s: contended warm-up: %v", s.Name, err)
	}

	var (
		mu         sync.Mutex
		holds      []holdRecord
		grants     = make([]int, n) // guarded by mu
		atFirst    []int            // grants when the first goroutine finished
		errs       []string
		holders    atomic.Int32
		violations atomic.Int32
		wg         sync.WaitGroup
	)
	fail := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 5 {
			errs = append(errs, fmt.Sprintf("%s: %v", what, err))
		}
	}
	// The run starts with every goroutine asking while the gate holds the
	// key, so that the first pass goes in the order the requests reached
	// the service (as every later one does), not in the order in which 64
	// goroutines happened to start: one that started late would otherwise
	// ask after the first holder had already asked again, and stay a grant
	// behind it for the whole run. The gate's release is the first
	// hand-off; its grant is not counted.
	gateUnlock, err := gate.Lock(runCtx, key)
	if err != nil {
		r.tb.Fatalf("%s: gate: %v", s.Name, err)
	}
	holders.Store(1)
	var (
		asking   atomic.Int32
		allAsked = make(chan struct{})
	)
	before := r.counters(ctx, s)
	for g, l := range lockers {
		wg.Go(func() {
			for k := range share {
				asked := time.Now()
				if k == 0 && int(asking.Add(1)) == n {
					close(allAsked)
				}
				u, err := l.Lock(runCtx, key)
				if err != nil {
					if runCtx.Err() == nil {
						fail("lock", err)
					}
					return
				}
				acquired := time.Now()
				if holders.Add(1) != 1 {
					violations.Add(1)
				}
				time.Sleep(r.p.Hold) // the work done under the lock
				holders.Add(-1)
				released := time.Now()
				mu.Lock()
				holds = append(holds, holdRecord{g: g, asked: asked, acquired: acquired, released: released})
				grants[g]++
				if grants[g] == share && atFirst == nil {
					atFirst = slices.Clone(grants)
				}
				mu.Unlock()
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				err = u(rctx)
				rcancel()
				if err != nil {
					fail("unlock", err)
					return
				}
			}
		})
	}
	<-allAsked
	time.Sleep(gateSettle * r.p.Hold)
	start := time.Now()
	holders.Add(-1)
	if err := gateUnlock(ctx); err != nil {
		fail("gate unlock", err)
	}
	wg.Wait()
	total := time.Since(start)
	after := r.counters(ctx, s)
	if runCtx.Err() != nil {
		cr.Incomplete++
	}

	slices.SortFunc(holds, func(a, b holdRecord) int { return a.acquired.Compare(b.acquired) })
	cr.Overtakes += overtakes(holds)
	for i, h := range holds {
		cr.HoldTotal += h.released.Sub(h.acquired)
		if i > 0 {
			gap := h.acquired.Sub(holds[i-1].released)
			if gap < 0 {
				violations.Add(1)
			}
			cr.Gaps = append(cr.Gaps, gap)
			if h.g != holds[i-1].g {
				cr.Handoffs++
				cr.HandoffGap = append(cr.HandoffGap, gap)
			}
		}
	}
	if r.roundDone != nil {
		r.roundDone(s, n, holds)
	}
	if atFirst == nil {
		atFirst = grants
	}
	ratio, starved := fairness(atFirst)
	if math.IsInf(ratio, 1) {
		ratio = -1 // JSON has no infinity
	}
	cr.Fairness = append(cr.Fairness, ratio)
	cr.Starved += starved
	cr.Grants += len(holds)
	cr.Total += total
	cr.Delta = addSnap(cr.Delta, after.Sub(before))
	cr.Violations += int(violations.Load())
	cr.Errors = append(cr.Errors, errs...)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// held acquires HeldSizes locks through one Client per backend and counts
// what keeping them costs while the watchdog renews them.
func (r *Runner) held(ctx context.Context) map[string][]*HeldResult {
	out := map[string][]*HeldResult{}
	for _, s := range r.with(Held) {
		for _, n := range r.p.HeldSizes {
			out[s.ID] = append(out[s.ID], r.heldOnce(ctx, s, n))
			r.logf("held: %s, %d locks done", s.Name, n)
		}
	}
	return out
}

func (r *Runner) heldOnce(ctx context.Context, s Subject, n int) *HeldResult {
	b, closeB, err := s.Backend(r.env)
	if err != nil {
		r.tb.Fatalf("%s: backend: %v", s.Name, err)
	}
	defer func() {
		if err := closeB(); err != nil {
			r.tb.Errorf("%s: close backend: %v", s.Name, err)
		}
	}()
	cb := countBackend(b)
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)

	c, err := distlock.New(cb, distlock.WithTTL(r.p.HeldTTL))
	if err != nil {
		r.tb.Fatalf("%s: distlock.New: %v", s.Name, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := c.Close(cctx); err != nil {
			r.tb.Errorf("%s: Client.Close: %v", s.Name, err)
		}
	}()

	locks := make([]*distlock.Lock, n)
	t0 := time.Now()
	err = parallel(16, n, func(i int) error {
		l, err := c.Acquire(ctx, keyFor(s, "held/"+strconv.Itoa(i)))
		locks[i] = l
		return err
	})
	if err != nil {
		r.tb.Fatalf("%s: acquire %d locks: %v", s.Name, n, err)
	}
	res := &HeldResult{Locks: n, AcquireTime: time.Since(t0)}

	// Let the first renewals start, then count over a window.
	sleepCtx(ctx, r.p.HeldTTL/3)
	before, calls0 := r.counters(ctx, s), cb.load()
	w0 := time.Now()
	sleepCtx(ctx, r.p.HeldWindow)
	res.Window = time.Since(w0)
	res.Delta = r.counters(ctx, s).Sub(before)
	calls1 := cb.load()
	res.BatchCalls = calls1.batch - calls0.batch
	res.SingleCalls = calls1.single - calls0.single
	res.Renewed = calls1.leases - calls0.leases
	res.RequestsPerS = float64(res.Delta.Requests) / res.Window.Seconds()

	runtime.GC()
	runtime.ReadMemStats(&m1)
	res.Goroutines = distlockGoroutines()
	res.HeapPerLock = (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / float64(n)
	for _, l := range locks {
		if l.Err() != nil {
			res.Lost++
		}
	}
	err = parallel(16, n, func(i int) error {
		if err := locks[i].Release(ctx); err != nil && !errors.Is(err, distlock.ErrLockLost) {
			return err
		}
		return nil
	})
	if err != nil {
		r.tb.Errorf("%s: release %d locks: %v", s.Name, n, err)
	}
	return res
}

// distlockGoroutines counts the goroutines that run distlock code or were
// started by it: a frame or the creator in the distlock module, outside
// this benchmark's package and the test servers' process waiters. Counting them by their stacks, rather than as
// the process's count against a baseline, keeps goroutines of earlier
// measurements that exit late (go-redis ends a closed pub/sub's goroutines
// asynchronously) out of the figure. Goroutines of the service's client
// library (go-redis, the etcd client's keep-alive and watch streams) are
// not counted: there is one set per backend, whatever the number of locks.
func distlockGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			if strings.Contains(line, "github.com/distlock/distlock") && !strings.Contains(line, "github.com/distlock/distlock/bench") &&
				!strings.Contains(line, "github.com/distlock/distlock/testserver") {
				count++
				break
			}
		}
	}
	return count
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(workers, n int, f func(i int) error) error {
	var (
		next atomic.Int64
		mu   sync.Mutex
		errs error
		wg   sync.WaitGroup
	)
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if errs == nil {
						errs = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return errs
}

type callCounts struct{ batch, single, leases int64 }

// countingBackend counts the refresh calls the Client's watchdog makes.
type countingBackend struct {
	driver.Backend
	batch, single, leases atomic.Int64
}

type countingLease struct {
	driver.Lease
	b *countingBackend
}

// countingBatchBackend also forwards RefreshAll, so that the Client
// batches as it would with the bare backend.
type countingBatchBackend struct {
	*countingBackend
	br driver.BatchRefresher
}

var (
	_ driver.Backend        = (*countingBackend)(nil)
	_ driver.BatchRefresher = countingBatchBackend{}
)

type counted interface {
	driver.Backend
	load() callCounts
}

func countBackend(b driver.Backend) counted {
	cb := &countingBackend{Backend: b}
	if br, ok := b.(driver.BatchRefresher); ok {
		return countingBatchBackend{countingBackend: cb, br: br}
	}
	return cb
}

func (c *countingBackend) load() callCounts {
	return callCounts{c.batch.Load(), c.single.Load(), c.leases.Load()}
}

func (c *countingBackend) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	l, err := c.Backend.Acquire(ctx, key, o)
	if err != nil {
		return nil, err
	}
	return &countingLease{Lease: l, b: c}, nil
}

func (l *countingLease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	l.b.single.Add(1)
	l.b.leases.Add(1)
	return l.Lease.Refresh(ctx, ttl)
}

func (c countingBatchBackend) RefreshAll(ctx context.Context, leases []driver.Lease, ttl time.Duration) []driver.RefreshResult {
	c.batch.Add(1)
	c.leases.Add(int64(len(leases)))
	inner := make([]driver.Lease, len(leases))
	for i, l := range leases {
		if cl, ok := l.(*countingLease); ok {
			inner[i] = cl.Lease
		} else {
			inner[i] = l
		}
	}
	return c.br.RefreshAll(ctx, inner, ttl)
}
