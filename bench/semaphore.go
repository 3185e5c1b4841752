package bench

// The semaphore measurement: a permit cycle of package semaphore against
// the same backend's lock cycle, and permits under contention.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/semaphore"
)

// semaphoreCommand measures the semaphore rows alone (see
// TestSemaphoreRows).
const semaphoreCommand = "cd bench && go test -run TestSemaphoreRows -semaphore all -v ."

// SemaphoreResult is the semaphore measurement of one distlock row.
type SemaphoreResult struct {
	// NoPermits, when not empty, says why the row took no measurement:
	// its backend grants no permits (it does not implement
	// driver.Semaphores, or its permits are refused as unsupported).
	NoPermits string
	Limit     int

	Lock   []time.Duration // uncontended Client.Acquire + Lock.Release cycles, sorted
	Permit []time.Duration // uncontended Semaphore.Acquire + Permit.Release cycles, sorted

	Counted     int      // cycles of each kind whose requests were counted (untimed)
	LockDelta   Snapshot // counters over Counted lock cycles
	PermitDelta Snapshot // counters over Counted permit cycles

	Contended *SemaphoreContention // nil when not measured
}

// SemaphoreContention is the contended part of the semaphore measurement:
// Workers instances (processes) sharing Limit permits of one semaphore.
type SemaphoreContention struct {
	Workers    int
	Limit      int
	Grants     int             // permits granted in all rounds
	Total      time.Duration   // wall time of all rounds, the start to the last release
	HoldTotal  time.Duration   // time permits were held, over all grants
	Waits      []time.Duration // an Acquire call to its return, for every grant, sorted
	Peak       int             // most permits held at once
	Delta      Snapshot        // counters over all rounds
	Violations int             // grants that made more holders than the limit
	Incomplete int             // rounds stopped at ContentionLimit
	Errors     []string        // unexpected errors (at most a few)
}

// Use is the share of the permits' time that they were held: hold time
// over Limit times the wall time. The workers outnumber the permits, so
// a permit is idle only while it passes from a releaser to a waiter.
func (c *SemaphoreContention) Use() float64 {
	if c.Total <= 0 || c.Limit == 0 {
		return 0
	}
	return float64(c.HoldTotal) / (float64(c.Limit) * float64(c.Total))
}

// semRow is a distlock row that grants permits, opened for the
// measurement: its Client (one instance, one "process"), and a semaphore
// over it.
type semRow struct {
	s   Subject
	d   *distlockLocker
	sem *semaphore.Semaphore
}

// noPermits reports why the backend of l grants no permits, or "" if it
// implements driver.Semaphores. Backends gain permits one by one, so the
// check is made at run time: a row is measured as soon as its backend
// has them.
func noPermits(l Locker) string {
	d, ok := l.(*distlockLocker)
	if !ok || d.b == nil {
		return "not a distlock Client over a backend"
	}
	if _, ok := d.b.(driver.Semaphores); !ok {
		return fmt.Sprintf("its backend (%T) does not implement driver.Semaphores", d.b)
	}
	return ""
}

// semaphores measures, per distlock row whose backend grants permits, an
// uncontended permit cycle (semaphore.New(client, name, limit): Acquire,
// then Release) against the same Client's lock cycle (Client.Acquire,
// then Lock.Release), cycle by cycle in turns as the latency measurement
// takes them; then SemaphoreWorkers instances sharing SemaphoreLimit
// permits. A row whose backend grants no permits is recorded with the
// reason, and measured no further.
func (r *Runner) semaphores(ctx context.Context) map[string]*SemaphoreResult {
	subs := r.with(Semaphore)
	out := map[string]*SemaphoreResult{}
	var rows []semRow
	defer func() { // the rows opened so far, on every return
		for _, row := range rows {
			r.closeLocker(row.s, row.d)
		}
	}()
	for _, s := range subs {
		sr := &SemaphoreResult{Limit: r.p.SemaphoreLimit}
		out[s.ID] = sr
		l := r.open(s)
		if sr.NoPermits = noPermits(l); sr.NoPermits != "" {
			r.closeLocker(s, l)
			r.logf("semaphores: %s: no permits: %s", s.Name, sr.NoPermits)
			continue
		}
		d := l.(*distlockLocker)
		sem, err := semaphore.New(d.c, keyFor(s, "semaphore"), r.p.SemaphoreLimit)
		if err != nil {
			r.closeLocker(s, l)
			r.tb.Fatalf("%s: semaphore.New: %v", s.Name, err)
		}
		// A backend can implement the interface and still refuse permits
		// (a wrapper over one that has none): that row has no permits
		// either.
		p, err := sem.Acquire(ctx)
		if errors.Is(err, errors.ErrUnsupported) {
			r.closeLocker(s, l)
			sr.NoPermits = "its permits are refused as unsupported: " + err.Error()
			r.logf("semaphores: %s: no permits: %s", s.Name, sr.NoPermits)
			continue
		}
		if err == nil {
			err = p.Release(ctx)
		}
		if err != nil {
			r.closeLocker(s, l)
			r.tb.Fatalf("%s: first permit: %v", s.Name, err)
		}
		rows = append(rows, semRow{s: s, d: d, sem: sem})
	}
	if len(rows) == 0 {
		return out
	}

	// The two cycles of a row: lock (k 0) and permit (k 1).
	cycle := func(row semRow, k int) time.Duration {
		t0 := time.Now()
		var err error
		if k == 0 {
			l, aerr := row.d.c.Acquire(ctx, keyFor(row.s, "semaphore-lock"))
			if err = aerr; err == nil {
				err = l.Release(ctx)
			}
		} else {
			p, aerr := row.sem.Acquire(ctx)
			if err = aerr; err == nil {
				err = p.Release(ctx)
			}
		}
		d := time.Since(t0)
		if err != nil {
			r.tb.Fatalf("%s: semaphore measurement, %s cycle: %v", row.s.Name, [2]string{"lock", "permit"}[k], err)
		}
		return d
	}
	for _, row := range rows { // warm up: connections, scripts, sessions
		for range 10 {
			cycle(row, 0)
			cycle(row, 1)
		}
	}
	// Requests per cycle, apart from the timed cycles (see latency).
	for _, row := range rows {
		sr := out[row.s.ID]
		sr.Counted = r.p.LatencyCountOps
		before := r.counters(ctx, row.s)
		for range r.p.LatencyCountOps {
			cycle(row, 0)
		}
		mid := r.counters(ctx, row.s)
		for range r.p.LatencyCountOps {
			cycle(row, 1)
		}
		sr.LockDelta, sr.PermitDelta = mid.Sub(before), r.counters(ctx, row.s).Sub(mid)
	}
	// Timed cycles: within a service, every row's lock and permit cycles
	// take turns cycle by cycle, each turn in an order drawn at random, so
	// that noise falls on both alike and neither always comes right after
	// the same cycle; services one after the other (see latency).
	type turn struct {
		row semRow
		k   int
	}
	var groups [][]turn
	for _, row := range rows {
		ts := []turn{{row, 0}, {row, 1}}
		if n := len(groups); n > 0 && groups[n-1][0].row.s.Service == row.s.Service {
			groups[n-1] = append(groups[n-1], ts...)
		} else {
			groups = append(groups, ts)
		}
	}
	rng := turnOrders()
	for round := range r.p.Rounds {
		for _, g := range groups {
			for range r.p.LatencyOps {
				for _, t := range shuffled(rng, g) {
					d := cycle(t.row, t.k)
					sr := out[t.row.s.ID]
					if t.k == 0 {
						sr.Lock = append(sr.Lock, d)
					} else {
						sr.Permit = append(sr.Permit, d)
					}
				}
			}
		}
		r.logf("semaphores: round %d/%d done", round+1, r.p.Rounds)
	}
	for _, sr := range out {
		slices.Sort(sr.Lock)
		slices.Sort(sr.Permit)
	}

	if r.p.SemaphoreWorkers > 0 {
		for _, row := range rows {
			out[row.s.ID].Contended = &SemaphoreContention{Workers: r.p.SemaphoreWorkers, Limit: r.p.SemaphoreLimit}
		}
		for round := range r.p.ContentionRounds {
			for j := range rows {
				row := rows[(round+j)%len(rows)]
				r.semaphoreRound(ctx, row.s, round, out[row.s.ID].Contended)
			}
			r.logf("semaphores, %d workers on %d permits: round %d/%d done", r.p.SemaphoreWorkers, r.p.SemaphoreLimit, round+1, r.p.ContentionRounds)
		}
		for _, sr := range out {
			if sr.Contended != nil {
				slices.Sort(sr.Contended.Waits)
			}
		}
	}
	return out
}

// semaphoreRound runs sc.Workers goroutines, each with an instance of its
// own (a process), sharing sc.Limit permits of one semaphore until each
// has been granted one ContentionGrants/Workers times; each holds its
// permit for Hold and asks again at once. It counts the holders at every
// grant: more than the limit is a violation.
func (r *Runner) semaphoreRound(ctx context.Context, s Subject, round int, sc *SemaphoreContention) {
	n := sc.Workers
	lockers := make([]Locker, n)
	for i := range lockers {
		lockers[i] = r.open(s)
	}
	defer func() {
		for _, l := range lockers {
			r.closeLocker(s, l)
		}
	}()
	name := keyFor(s, "semaphore-contended/"+strconv.Itoa(round))
	sems := make([]*semaphore.Semaphore, n)
	for i, l := range lockers {
		d, ok := l.(*distlockLocker)
		if !ok {
			r.tb.Fatalf("%s: takes part in semaphores, and is not a distlock Client", s.Name)
		}
		sem, err := semaphore.New(d.c, name, sc.Limit)
		if err != nil {
			r.tb.Fatalf("%s: semaphore.New: %v", s.Name, err)
		}
		sems[i] = sem
	}
	// Connections and sessions are made before the measured grants, on a
	// semaphore of each instance's own: a process pays for them once.
	err := parallel(16, n, func(i int) error {
		sem, err := semaphore.New(lockers[i].(*distlockLocker).c, keyFor(s, "semaphore-warm/"+strconv.Itoa(i)), sc.Limit)
		if err != nil {
			return err
		}
		p, err := sem.Acquire(ctx)
		if err == nil {
			err = p.Release(ctx)
		}
		return err
	})
	if err != nil {
		r.tb.Fatalf("%s: warm-up: %v", s.Name, err)
	}
	share := max(1, r.p.ContentionGrants/n)
	runCtx, cancel := context.WithTimeout(ctx, r.p.ContentionLimit)
	defer cancel()
	var (
		mu         sync.Mutex
		waits      []time.Duration
		hold       time.Duration
		errs       []string
		holders    atomic.Int32
		peak       atomic.Int32
		violations atomic.Int32
		wg         sync.WaitGroup
		startLine  = make(chan struct{})
	)
	fail := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 3 {
			errs = append(errs, fmt.Sprintf("%s: %v", what, err))
		}
	}
	before := r.counters(ctx, s)
	for _, sem := range sems {
		wg.Go(func() {
			<-startLine
			for range share {
				asked := time.Now()
				p, err := sem.Acquire(runCtx)
				if err != nil {
					if runCtx.Err() == nil {
						fail("acquire", err)
					}
					return
				}
				acquired := time.Now()
				h := holders.Add(1)
				if int(h) > sc.Limit {
					violations.Add(1)
				}
				for {
					pk := peak.Load()
					if h <= pk || peak.CompareAndSwap(pk, h) {
						break
					}
				}
				time.Sleep(r.p.Hold) // the work done under the permit
				holders.Add(-1)
				released := time.Now()
				mu.Lock()
				waits = append(waits, acquired.Sub(asked))
				hold += released.Sub(acquired)
				mu.Unlock()
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				err = p.Release(rctx)
				rcancel()
				if err != nil {
					fail("release", err)
					return
				}
			}
		})
	}
	start := time.Now()
	close(startLine)
	wg.Wait()
	total := time.Since(start)
	after := r.counters(ctx, s)
	if runCtx.Err() != nil {
		sc.Incomplete++
	}
	sc.Grants += len(waits)
	sc.Waits = append(sc.Waits, waits...)
	sc.HoldTotal += hold
	sc.Total += total
	sc.Peak = max(sc.Peak, int(peak.Load()))
	sc.Violations += int(violations.Load())
	sc.Delta = addSnap(sc.Delta, after.Sub(before))
	sc.Errors = append(sc.Errors, errs...)
}

// ratios returns a row's permit/lock ratios of the p50 and the
// p99 (0 when either is missing).
func (sr *SemaphoreResult) ratios() (p50, p99 float64) {
	if len(sr.Lock) == 0 || len(sr.Permit) == 0 {
		return 0, 0
	}
	ratio := func(q float64) float64 {
		l, p := quantile(sr.Lock, q), quantile(sr.Permit, q)
		if l <= 0 {
			return 0
		}
		return float64(p) / float64(l)
	}
	return ratio(0.5), ratio(0.99)
}

func (rp *Report) writeSemaphores(pf func(string, ...any), section int) {
	p := rp.Res.Params
	pf("## %d. Semaphores: a permit cycle against the same backend's lock cycle\n\n", section)
	if rp.Res.Semaphore == nil {
		pf("Not measured in this run (its results predate the measurement): `%s` measures it alone.\n\n", semaphoreCommand)
		return
	}
	pf("Each distlock row's Client (one instance) takes uncontended cycles of two kinds: a permit of package semaphore (`semaphore.New(client, name, %d)`, `Semaphore.Acquire`, `Permit.Release`) and a lock of the same Client (`Client.Acquire`, `Lock.Release`), %d timed cycles of each, the cycles of the rows of a service taking turns cycle by cycle, each turn in an order drawn at random, as in section 1. ",
		p.SemaphoreLimit, p.Rounds*p.LatencyOps)
	pf("A row is measured when its backend implements `driver.Semaphores` (checked at run time); the others say so. Requests are counted over %d further cycles of each kind.\n\n", p.LatencyCountOps)
	pf("| service | subject | lock p50 | lock p99 | permit p50 | permit p99 | permit/lock p50 | permit/lock p99 | requests/cycle: lock | permit | permit requests by name, per cycle |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	var contended []Subject
	for _, s := range rp.Subjects {
		sr := rp.Res.Semaphore[s.ID]
		if sr == nil {
			continue
		}
		if sr.NoPermits != "" {
			pf("| %s | %s | no permits: %s | | | | | | | | |\n", s.Service, s.Name, sr.NoPermits)
			continue
		}
		r50, r99 := sr.ratios()
		pf("| %s | %s | %s | %s | %s | %s | %sx | %sx | %s | %s | %s |\n", s.Service, s.Name,
			fmtDur(quantile(sr.Lock, 0.5)), fmtDur(quantile(sr.Lock, 0.99)),
			fmtDur(quantile(sr.Permit, 0.5)), fmtDur(quantile(sr.Permit, 0.99)),
			sig3(r50), sig3(r99), perUnit(sr.LockDelta.Requests, sr.Counted), perUnit(sr.PermitDelta.Requests, sr.Counted),
			breakdownRequests(sr.PermitDelta, sr.Counted))
		if sr.Contended != nil {
			contended = append(contended, s)
		}
	}
	pf("\n")
	if len(contended) == 0 {
		return
	}
	pf("Under contention: %d goroutines, each with an instance of its own (a process), share the %d permits of one semaphore until each has been granted one %d times; each holds its permit for %s, then releases it and asks again at once. %d rounds. ",
		p.SemaphoreWorkers, p.SemaphoreLimit, max(1, p.ContentionGrants/max(1, p.SemaphoreWorkers)), p.Hold, p.ContentionRounds)
	pf("The wait is from an Acquire call to its return. Use is the time permits were held over %d times the wall time: the waiters outnumber the permits, so a permit is idle only while it passes from a releaser to a waiter. Peak is the most permits held at once, counted at every grant; more than the limit would be a violation.\n\n", p.SemaphoreLimit)
	pf("| service | subject | workers / permits | grants | grants/s | wait p50 | wait p99 | use | peak | requests/grant | violations |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range contended {
		sc := rp.Res.Semaphore[s.ID].Contended
		rate := 0.0
		if sc.Total > 0 {
			rate = float64(sc.Grants) / sc.Total.Seconds()
		}
		viol := fmt.Sprint(sc.Violations)
		if sc.Incomplete > 0 {
			viol += fmt.Sprintf("; %d rounds stopped after %s", sc.Incomplete, p.ContentionLimit)
		}
		if len(sc.Errors) > 0 {
			viol += "; errors: " + strings.Join(sc.Errors, "; ")
		}
		pf("| %s | %s | %d / %d | %d | %s | %s | %s | %.0f%% | %d | %s | %s |\n", s.Service, s.Name, sc.Workers, sc.Limit, sc.Grants,
			fmtRate(rate), fmtDur(quantile(sc.Waits, 0.5)), fmtDur(quantile(sc.Waits, 0.99)), 100*sc.Use(), sc.Peak,
			perUnit(sc.Delta.Requests, sc.Grants), viol)
	}
	pf("\n")
}
