package bench

// The shared-lock measurement: a read-lock cycle of package rwlock against
// the same Client's lock cycle.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/rwlock"
)

// SharedResult is the shared-lock measurement of one distlock row.
type SharedResult struct {
	// NoShared, when not empty, says why the row took no measurement:
	// its backend grants no shared locks.
	NoShared string

	Lock []time.Duration // uncontended Client.Acquire + Lock.Release cycles, sorted
	Read []time.Duration // uncontended RWLock.RLock + Lock.Release cycles, sorted

	Counted   int      // cycles of each kind whose requests were counted (untimed)
	LockDelta Snapshot // counters over Counted lock cycles
	ReadDelta Snapshot // counters over Counted read-lock cycles
}

// noShared reports why the backend of l grants no shared locks, or "" if
// it implements driver.SharedLocks (checked at run time, as noPermits).
func noShared(l Locker) string {
	d, ok := l.(*distlockLocker)
	if !ok || d.b == nil {
		return "not a distlock Client over a backend"
	}
	if _, ok := d.b.(driver.SharedLocks); !ok {
		return fmt.Sprintf("its backend (%T) does not implement driver.SharedLocks", d.b)
	}
	return ""
}

// shared measures, per distlock row of subs whose backend grants shared
// locks, an uncontended read-lock cycle against the same Client's lock
// cycle (each on a key of its own), cycle by cycle within a service,
// each turn in an order drawn at random, as the semaphore measurement
// takes its cycles.
func (r *Runner) shared(ctx context.Context, subs []Subject) map[string]*SharedResult {
	type row struct {
		s  Subject
		d  *distlockLocker
		rw *rwlock.RWLock
	}
	out := map[string]*SharedResult{}
	var rows []row
	defer func() {
		for _, x := range rows {
			r.closeLocker(x.s, x.d)
		}
	}()
	for _, s := range subs {
		sr := &SharedResult{}
		out[s.ID] = sr
		l := r.open(s)
		if sr.NoShared = noShared(l); sr.NoShared != "" {
			r.closeLocker(s, l)
			continue
		}
		d := l.(*distlockLocker)
		rw, err := rwlock.New(d.c, keyFor(s, "shared"))
		if err != nil {
			r.closeLocker(s, l)
			r.tb.Fatalf("%s: rwlock.New: %v", s.Name, err)
		}
		// A backend can implement the interface and refuse shared locks
		// in one of its modes (pglock's lease mode).
		rl, err := rw.RLock(ctx)
		if errors.Is(err, errors.ErrUnsupported) {
			r.closeLocker(s, l)
			sr.NoShared = "its shared locks are refused as unsupported: " + err.Error()
			continue
		}
		if err == nil {
			err = rl.Release(ctx)
		}
		if err != nil {
			r.closeLocker(s, l)
			r.tb.Fatalf("%s: first read lock: %v", s.Name, err)
		}
		rows = append(rows, row{s: s, d: d, rw: rw})
	}
	cycle := func(x row, read bool) time.Duration {
		t0 := time.Now()
		acquire := func(ctx context.Context) (interface{ Release(context.Context) error }, error) {
			return x.d.c.Acquire(ctx, keyFor(x.s, "shared-lock"))
		}
		if read {
			acquire = func(ctx context.Context) (interface{ Release(context.Context) error }, error) {
				return x.rw.RLock(ctx)
			}
		}
		l, err := acquire(ctx)
		if err == nil {
			err = l.Release(ctx)
		}
		d := time.Since(t0)
		if err != nil {
			r.tb.Fatalf("%s: shared measurement (read %v): %v", x.s.Name, read, err)
		}
		return d
	}
	for _, x := range rows { // warm up: connections, scripts, sessions
		for range 10 {
			cycle(x, false)
			cycle(x, true)
		}
	}
	for _, x := range rows { // requests per cycle, apart from the timed cycles
		sr := out[x.s.ID]
		sr.Counted = r.p.LatencyCountOps
		before := r.counters(ctx, x.s)
		for range r.p.LatencyCountOps {
			cycle(x, false)
		}
		mid := r.counters(ctx, x.s)
		for range r.p.LatencyCountOps {
			cycle(x, true)
		}
		sr.LockDelta, sr.ReadDelta = mid.Sub(before), r.counters(ctx, x.s).Sub(mid)
	}
	type turn struct {
		x    row
		read bool
	}
	var groups [][]turn
	for _, x := range rows {
		ts := []turn{{x, false}, {x, true}}
		if n := len(groups); n > 0 && groups[n-1][0].x.s.Service == x.s.Service {
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
					d := cycle(t.x, t.read)
					if sr := out[t.x.s.ID]; t.read {
						sr.Read = append(sr.Read, d)
					} else {
						sr.Lock = append(sr.Lock, d)
					}
				}
			}
		}
		r.logf("shared locks: round %d/%d done", round+1, r.p.Rounds)
	}
	for _, sr := range out {
		slices.Sort(sr.Lock)
		slices.Sort(sr.Read)
	}
	return out
}
