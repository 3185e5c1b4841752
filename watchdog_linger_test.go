package distlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// Short-TTL locks taken and released at gaps around the watchdog's 1s
// linger, from several goroutines: every renewal within TTL/3 of the last,
// no lock lost, and Close ends everything (synctest fails on a leak).
// (From review: it reported about 19,000 late renewals with the early kick
// of a lingering watchdog removed.)
func TestWatchdogLingerRandom(t *testing.T) {
	for seed := range uint64(100) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { lingerRandom(t, seed) })
	}
}

func lingerRandom(t *testing.T, seed uint64) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &recBackend{Backend: memlock.New(), refs: map[string][]time.Time{}, keys: map[driver.Lease]string{}}
		c, err := distlock.New(b, distlock.WithDrift(0), distlock.WithSafetyMargin(0))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		workers := 1 + int(seed%4)
		for w := range workers {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(seed, uint64(w)))
				for i := range 40 {
					gap := time.Duration(900+r.IntN(201)) * time.Millisecond
					if r.IntN(4) == 0 {
						gap = time.Duration(r.IntN(1200)) * time.Millisecond
					}
					time.Sleep(gap)
					ttl := time.Duration(300+r.IntN(2701)) * time.Millisecond
					key := fmt.Sprintf("w%d-%d", w, i)
					start := time.Now()
					l, err := c.Acquire(ctx, key, distlock.WithTTL(ttl))
					if err != nil {
						t.Errorf("%s: %v", key, err)
						return
					}
					hold := time.Duration(r.IntN(2500)) * time.Millisecond
					if r.IntN(3) == 0 {
						hold = time.Duration(r.IntN(50)) * time.Millisecond
					}
					time.Sleep(hold)
					if err := l.Err(); err != nil {
						t.Errorf("%s (ttl %v): lost after %v: %v", key, ttl, time.Since(start), err)
					}
					end := time.Now()
					l.Release(ctx)
					b.mu.Lock()
					refs := slices.Clone(b.refs[key])
					b.mu.Unlock()
					last := start
					for _, rt := range append(refs, end) {
						if rt.Sub(last) > ttl/3 {
							t.Errorf("%s (ttl %v): no renewal for %v from +%v", key, ttl, rt.Sub(last), last.Sub(start))
						}
						last = rt
					}
				}
			})
		}
		wg.Wait()
		// Sometimes close mid-linger, sometimes right at its end.
		r := rand.New(rand.NewPCG(seed, 99))
		time.Sleep(time.Duration(r.IntN(1100)) * time.Millisecond)
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Close racing with Acquire while the watchdog lingers.
func TestWatchdogLingerCloseRace(t *testing.T) {
	for seed := range uint64(100) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 7))
				ctx := context.Background()
				c, err := distlock.New(memlock.New(), distlock.WithTTL(300*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				l, _ := c.Acquire(ctx, "a")
				l.Release(ctx)
				time.Sleep(time.Duration(r.IntN(1100)) * time.Millisecond)
				var wg sync.WaitGroup
				for i := range 5 {
					d1, d2 := time.Duration(r.IntN(3))*time.Millisecond, time.Duration(r.IntN(500))*time.Millisecond
					wg.Go(func() {
						time.Sleep(d1)
						if l, err := c.Acquire(ctx, fmt.Sprint("k", i)); err == nil {
							time.Sleep(d2)
							l.Release(ctx)
						}
					})
				}
				time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
				if err := c.Close(ctx); err != nil {
					t.Fatal(err)
				}
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				<-done
			})
		})
	}
}
