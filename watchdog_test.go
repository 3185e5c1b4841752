package distlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// recBackend records when each lease is refreshed, by key.
type recBackend struct {
	*memlock.Backend
	mu   sync.Mutex
	refs map[string][]time.Time
	keys map[driver.Lease]string
}

func (b *recBackend) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	l, err := b.Backend.Acquire(ctx, key, o)
	if err == nil {
		b.mu.Lock()
		b.keys[l] = key
		b.mu.Unlock()
	}
	return l, err
}

func (b *recBackend) RefreshAll(ctx context.Context, ls []driver.Lease, ttl time.Duration) []driver.RefreshResult {
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
		b := &recBackend{Backend: memlock.New(), refs: map[string][]time.Time{}, keys: map[driver.Lease]string{}}
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
			opts := []distlock.LockOption{distlock.WithTTL(x.ttl)}
			if r.IntN(3) == 0 {
				x.noRenew = true
				opts = append(opts, distlock.WithRenewal(distlock.NoRenewal))
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

// The watchdog sleeps until its next event and is woken only for an
// earlier one. After a long lock is released, its timer is still set for
// that lock's renewal; a later lock with a shorter lease must still be
// renewed in time, and so must one with a longer lease.
func TestWatchdogTimerAfterHeapEmptied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := distlocktest.NewFaulty(memlock.New())
		c := newClient(t, f, distlock.WithDrift(0), distlock.WithSafetyMargin(0))
		long, err := c.Acquire(ctx, "a", distlock.WithTTL(30*time.Second)) // renewal due at +10s
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the watchdog sleeps, its timer set for +10s
		if err := long.Release(ctx); err != nil {
			t.Fatal(err)
		}

		// Earlier than the timer: the watchdog must be woken, or the short
		// lock (renewal due at +1s) would lapse before it looked.
		short, err := c.Acquire(ctx, "b", distlock.WithTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Second)
		if short.Err() != nil {
			t.Fatalf("short lock ended: %v", short.Err())
		}
		f.Partition()
		start := time.Now()
		<-short.Done()
		if got := time.Since(start); got <= 0 || got > 3*time.Second {
			t.Errorf("short lock lost %v after the partition, want within its 3s lease", got)
		}
		f.Heal()

		// Later than the timer: no wake-up is needed, and the renewals
		// still happen.
		l, err := c.Acquire(ctx, "c", distlock.WithTTL(60*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Minute)
		if l.Err() != nil {
			t.Fatalf("renewed lock ended: %v", l.Err())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// countingBackend counts batched refreshes; it adds nothing else.
type countingBackend struct {
	*memlock.Backend
	calls, leases atomic.Int64
}

func (b *countingBackend) RefreshAll(ctx context.Context, ls []driver.Lease, ttl time.Duration) []driver.RefreshResult {
	b.calls.Add(1)
	b.leases.Add(int64(len(ls)))
	return b.Backend.RefreshAll(ctx, ls, ttl)
}

// Holding 10,000 locks costs one goroutine, and renewals are batched.
func TestManyLocksOneWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &countingBackend{Backend: memlock.New()}
		c := newClient(t, b, distlock.WithTTL(15*time.Second))
		before := runtime.NumGoroutine()
		const n = 10_000
		locks := make([]*distlock.Lock, n)
		for i := range locks {
			l, err := c.Acquire(ctx, fmt.Sprintf("k/%d", i))
			if err != nil {
				t.Fatal(err)
			}
			locks[i] = l
			if i%1000 == 0 {
				time.Sleep(100 * time.Millisecond) // acquired over a second, not at one instant
			}
		}
		if g := runtime.NumGoroutine() - before; g > 2 {
			t.Errorf("%d goroutines for %d held locks", g, n)
		}
		time.Sleep(time.Minute)
		for _, l := range locks {
			if l.Err() != nil {
				t.Fatalf("lock %s lost: %v", l.Key(), l.Err())
			}
		}
		rounds := int64(time.Minute / 5 / time.Second)
		if got := b.leases.Load(); got < rounds*n*9/10 {
			t.Errorf("%d lease refreshes in a minute, want about %d", got, rounds*n)
		}
		if got := b.calls.Load(); got > rounds*3 {
			t.Errorf("%d refresh calls for %d rounds: renewals are not batched", got, rounds)
		}
		t.Logf("%d RefreshAll calls refreshed %d leases", b.calls.Load(), b.leases.Load())
		for _, l := range locks {
			l.Release(ctx)
		}
	})
}

// slowHandler takes d to write a record whose message contains match.
type slowHandler struct {
	match string
	d     time.Duration
}

func (h slowHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h slowHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		time.Sleep(h.d)
	}
	return nil
}

func (h slowHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h slowHandler) WithGroup(string) slog.Handler { return h }

// A slow log handler must not delay the loss notice: contexts are cancelled
// before anything is logged.
func TestSlowLoggerDoesNotDelayLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		a := newClient(t, srv, distlock.WithTTL(time.Second), distlock.WithRenewal(distlock.NoRenewal),
			distlock.WithLogger(slog.New(slowHandler{"lock lost", 5 * time.Second})))
		b := newClient(t, srv)
		la, _ := a.Acquire(ctx, "k")
		lb, err := b.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer lb.Release(ctx)
		select {
		case <-la.Done():
		default:
			t.Fatal("key granted to B while A's context is live")
		}
	})
}

// A slow log handler must not block the watchdog: refresh failures are
// logged outside the Client's lock.
func TestSlowLoggerDoesNotBlockWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		srv := memlock.New()
		f := distlocktest.NewFaulty(srv)
		a := newClient(t, f, distlock.WithTTL(300*time.Millisecond),
			distlock.WithLogger(slog.New(slowHandler{"refresh failed", time.Hour})))
		b := newClient(t, srv)
		la, _ := a.Acquire(ctx, "k")
		f.Partition()
		lb, err := b.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer lb.Release(ctx)
		select {
		case <-la.Done():
		default:
			t.Fatal("key granted to B while A's context is live: the watchdog was blocked")
		}
	})
}

// slowGrant confirms grants late and counts refreshes.
type slowGrant struct {
	*memlock.Backend
	d         time.Duration
	refreshes atomic.Int64
}

func (s *slowGrant) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	l, err := s.Backend.Acquire(ctx, key, o)
	time.Sleep(s.d)
	return l, err
}

func (s *slowGrant) RefreshAll(ctx context.Context, ls []driver.Lease, ttl time.Duration) []driver.RefreshResult {
	s.refreshes.Add(int64(len(ls)))
	return s.Backend.RefreshAll(ctx, ls, ttl)
}

// A grant confirmed late is renewed before its deadline, not one full
// interval later.
func TestLateGrantIsRenewedInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		b := &slowGrant{Backend: memlock.New(), d: 2200 * time.Millisecond}
		c := newClient(t, b, distlock.WithTTL(3*time.Second))
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		if l.Err() != nil {
			t.Errorf("lock lost after %d refreshes: %v", b.refreshes.Load(), l.Err())
		}
	})
}

// recordHandler keeps the messages of the records it is given, by level.
type recordHandler struct {
	mu   *sync.Mutex
	msgs *[]string
}

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.msgs = append(*h.msgs, r.Level.String()+" "+r.Message)
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

// At Debug the Client logs what happens to a healthy lock: its grant, its
// renewals and its release; a loss is a warning.
func TestLogsLockLife(t *testing.T) {
	var mu sync.Mutex
	var msgs []string
	log := slog.New(recordHandler{&mu, &msgs})
	inBubble(t, func(t *testing.T, srv *memlock.Backend, c *distlock.Client) {
		ctx := context.Background()
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(distlock.DefaultTTL / 2) // one renewal at TTL/3
		l.Release(ctx)
		l2, _ := c.Acquire(ctx, "k2")
		srv.Revoke("k2")
		synctest.Wait()
		l2.Release(ctx)
	}, distlock.WithLogger(log))
	mu.Lock()
	defer mu.Unlock()
	want := []string{"DEBUG distlock: acquired", "DEBUG distlock: renewed", "DEBUG distlock: released", "DEBUG distlock: acquired", "WARN distlock: lock lost"}
	if !slices.Equal(msgs, want) {
		t.Errorf("logged %q, want %q", msgs, want)
	}
}
