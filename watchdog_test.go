package distlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// recBackend records when each lease is refreshed, by key.
type recBackend struct {
	*memlock.Backend
	mu   sync.Mutex
	refs map[string][]time.Time
	keys map[distlock.Lease]string
}

func (b *recBackend) Acquire(ctx context.Context, key string, o distlock.AcquireOptions) (distlock.Lease, error) {
	l, err := b.Backend.Acquire(ctx, key, o)
	if err == nil {
		b.mu.Lock()
		b.keys[l] = key
		b.mu.Unlock()
	}
	return l, err
}

func (b *recBackend) RefreshAll(ctx context.Context, ls []distlock.Lease, ttl time.Duration) []distlock.RefreshResult {
	b.mu.Lock()
	for _, l := range ls {
		b.refs[b.keys[l]] = append(b.refs[b.keys[l]], time.Now())
	}
	b.mu.Unlock()
	return b.Backend.RefreshAll(ctx, ls, ttl)
}

// Random acquire/release sequences on whole-second grids (so that events
// often coincide exactly with the watchdog's timer, and locks are taken
// while it sleeps for another): every renewal must come within the renewal
// interval, every local deadline and MaxHold exactly on time.
func TestWatchdogEventsOnTime(t *testing.T) {
	for seed := range uint64(100) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { watchdogEventsOnTime(t, seed) })
	}
}

func watchdogEventsOnTime(t *testing.T, seed uint64) {
	synctest.Test(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(seed, 1))
		ctx := context.Background()
		b := &recBackend{Backend: memlock.New(), refs: map[string][]time.Time{}, keys: map[distlock.Lease]string{}}
		c := newClient(t, b, distlock.WithDrift(0), distlock.WithSafetyMargin(0))
		type rec struct {
			l                 *distlock.Lock
			start, end, relAt time.Time
			ttl, maxHold      time.Duration
			noRenew, released bool
		}
		var mu sync.Mutex
		var all, live []*rec
		// release releases x, noting when unless it had already ended.
		release := func(x *rec) {
			mu.Lock()
			ended := !x.end.IsZero()
			mu.Unlock()
			if !ended {
				x.relAt, x.released = time.Now(), true
			}
			x.l.Release(ctx)
		}
		for i := range 120 {
			switch r.IntN(4) {
			case 0: // same instant
			case 1:
				time.Sleep(time.Duration(r.IntN(12)) * time.Second)
			default:
				time.Sleep(time.Duration(r.IntN(12000)) * time.Millisecond)
			}
			if len(live) > 0 && r.IntN(2) == 0 {
				j := r.IntN(len(live))
				release(live[j])
				live = append(live[:j], live[j+1:]...)
				continue
			}
			x := &rec{ttl: []time.Duration{3, 6, 9, 12, 30, 60}[r.IntN(6)] * time.Second}
			opts := []distlock.Option{distlock.WithTTL(x.ttl)}
			if r.IntN(3) == 0 {
				x.noRenew = true
				opts = append(opts, distlock.WithoutRenewal())
			}
			if r.IntN(3) == 0 {
				x.maxHold = time.Duration(1+r.IntN(40)) * time.Second
				opts = append(opts, distlock.WithMaxHold(x.maxHold))
			}
			x.start = time.Now()
			l, err := c.Acquire(ctx, fmt.Sprintf("k%d", i), opts...)
			if err != nil {
				t.Fatal(err)
			}
			x.l = l
			go func() {
				<-l.Done()
				mu.Lock()
				x.end = time.Now()
				mu.Unlock()
			}()
			all, live = append(all, x), append(live, x)
		}
		for _, x := range live {
			release(x)
		}
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, x := range all {
			// When it should have ended by itself.
			var want time.Time
			if x.noRenew {
				want = x.start.Add(x.ttl)
			}
			if x.maxHold > 0 && (want.IsZero() || x.start.Add(x.maxHold).Before(want)) {
				want = x.start.Add(x.maxHold)
			}
			stop := x.end
			if x.released {
				if !want.IsZero() && x.relAt.After(want) {
					t.Errorf("%s: released at +%v but should have ended at +%v", x.l.Key(), x.relAt.Sub(x.start), want.Sub(x.start))
				}
			} else if !x.end.Equal(want) {
				t.Errorf("%s (ttl %v noRenew %v maxHold %v): ended at +%v, want +%v (%v)", x.l.Key(), x.ttl, x.noRenew, x.maxHold, x.end.Sub(x.start), want.Sub(x.start), x.l.Err())
			}
			if x.noRenew {
				continue
			}
			ri := x.ttl / 3
			b.mu.Lock()
			refs := b.refs[x.l.Key()]
			b.mu.Unlock()
			last := x.start
			for _, rt := range append(refs, stop) {
				if rt.Sub(last) > ri {
					t.Errorf("%s: no renewal for %v (interval %v) from +%v", x.l.Key(), rt.Sub(last), ri, last.Sub(x.start))
				}
				last = rt
			}
		}
	})
}
