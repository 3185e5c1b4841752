package driver_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond)
	}
}

func TestTryExcludesUntilDone(t *testing.T) {
	var q driver.Queue[struct{}]
	t1, ok := q.Try("a")
	if !ok {
		t.Fatal("Try of a free key failed")
	}
	if _, ok := q.Try("a"); ok {
		t.Fatal("Try of a taken key succeeded")
	}
	t2, ok := q.Try("b")
	if !ok {
		t.Fatal("Try of another key failed")
	}
	if q.Len() != 2 {
		t.Fatalf("Len = %d, want 2", q.Len())
	}
	t1.Done()
	t1.Done() // a second Done does nothing
	if _, ok := q.Try("b"); ok {
		t.Fatal("a second Done of a's turn freed b")
	}
	t3, ok := q.Try("a")
	if !ok {
		t.Fatal("Try after Done failed")
	}
	t1.Done() // still nothing: must not end t3's turn
	if _, ok := q.Try("a"); ok {
		t.Fatal("a stale Done ended the next turn")
	}
	t2.Done()
	t3.Done()
	if q.Len() != 0 {
		t.Fatalf("Len = %d after every Done, want 0", q.Len())
	}
}

// TestTryFailsWhileOthersWait: a try does not jump the queue, even in the
// instant between a Done and the next waiter's wake-up.
func TestTryFailsWhileOthersWait(t *testing.T) {
	var q driver.Queue[struct{}]
	first, _ := q.Try("k")
	got := make(chan *driver.Turn[struct{}])
	go func() {
		t, err := q.Wait(context.Background(), "k")
		if err != nil {
			panic(err)
		}
		got <- t
	}()
	waitFor(t, "the waiter to queue", func() bool { return q.Waiting("k") == 1 })
	first.Done()
	if _, ok := q.Try("k"); ok {
		t.Fatal("Try took the turn handed to a waiter")
	}
	(<-got).Done()
	if q.Len() != 0 {
		t.Fatalf("Len = %d, want 0", q.Len())
	}
}

func TestWaitEndedContext(t *testing.T) {
	var q driver.Queue[struct{}]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q.Wait(ctx, "free"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with an ended context on a free key: %v", err)
	}
	held, _ := q.Try("held")
	if _, err := q.Wait(ctx, "held"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with an ended context on a held key: %v", err)
	}
	if n := q.Waiting("held"); n != 0 {
		t.Fatalf("Waiting = %d after a cancelled Wait", n)
	}
	held.Done()
	if q.Len() != 0 {
		t.Fatalf("Len = %d, want 0", q.Len())
	}
}

func TestHolder(t *testing.T) {
	var q driver.Queue[*int]
	if q.Holder("k") != nil {
		t.Fatal("Holder of a free key is not nil")
	}
	tk, _ := q.Try("k")
	if q.Holder("k") != nil {
		t.Fatal("Holder before Set is not nil")
	}
	v := 7
	tk.Set(&v)
	if got := q.Holder("k"); got != &v {
		t.Fatalf("Holder = %v, want the value set", got)
	}
	got := make(chan *driver.Turn[*int])
	go func() {
		next, err := q.Wait(context.Background(), "k")
		if err != nil {
			panic(err)
		}
		got <- next
	}()
	waitFor(t, "the waiter to queue", func() bool { return q.Waiting("k") == 1 })
	tk.Done()
	next := <-got
	if q.Holder("k") != nil {
		t.Fatal("the next turn inherited the value")
	}
	tk.Set(&v) // a done turn ignores it
	if q.Holder("k") != nil {
		t.Fatal("Set on a done turn changed the next turn's value")
	}
	next.Done()
}

// TestFIFO: waiters get the turn in arrival order, and a waiter that gives
// up leaves the queue without taking a turn from the others.
func TestFIFO(t *testing.T) {
	var q driver.Queue[struct{}]
	first, _ := q.Try("k")
	const n = 8
	type result struct {
		i    int
		turn *driver.Turn[struct{}]
		err  error
	}
	results := make(chan result, n)
	cancels := make([]context.CancelFunc, n)
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		go func() {
			turn, err := q.Wait(ctx, "k")
			results <- result{i, turn, err}
		}()
		waitFor(t, fmt.Sprintf("waiter %d to queue", i), func() bool { return q.Waiting("k") == i+1 })
	}
	// Waiters 2 and 5 give up.
	for _, i := range []int{2, 5} {
		cancels[i]()
		r := <-results
		if r.i != i || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled waiter %d: got waiter %d, err %v", i, r.i, r.err)
		}
	}
	first.Done()
	for _, want := range []int{0, 1, 3, 4, 6, 7} {
		r := <-results
		if r.i != want || r.err != nil {
			t.Fatalf("turn went to waiter %d (err %v), want %d", r.i, r.err, want)
		}
		r.turn.Done()
	}
	for _, c := range cancels {
		c()
	}
	if q.Len() != 0 {
		t.Fatalf("Len = %d, want 0", q.Len())
	}
}

// TestRandomized checks, over random rounds on several keys at once, that
// turns go to waiters in arrival order, one at a time, that a waiter whose
// context ends at a random moment (possibly while the turn is handed to
// it) never takes a turn from the others nor loses one, and that the queue
// keeps nothing once everyone is done.
func TestRandomized(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 40
	}
	var q driver.Queue[int]
	var wg sync.WaitGroup
	for k := range 4 {
		key := fmt.Sprintf("key-%d", k)
		seed := rand.Uint64()
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(k)))
			for round := range rounds {
				if err := randomRound(&q, key, rng); err != nil {
					t.Errorf("%s, seed %d, round %d: %v", key, seed, round, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if q.Len() != 0 {
		t.Fatalf("Len = %d after every round, want 0", q.Len())
	}
}

// randomRound queues a random number of waiters behind a holder, then lets
// holders finish and waiters give up at random moments.
func randomRound(q *driver.Queue[int], key string, rng *rand.Rand) error {
	first, ok := q.Try(key)
	if !ok {
		return fmt.Errorf("Try of %s failed at the start of a round", key)
	}
	n := 1 + rng.IntN(12)
	var (
		inside  atomic.Int32 // holders of the turn right now
		mu      sync.Mutex
		granted []int // arrival indexes, in the order the turn reached them
		errs    []error
		wg      sync.WaitGroup
	)
	hold := func(turn *driver.Turn[int], i int, spins int) {
		if inside.Add(1) != 1 {
			mu.Lock()
			errs = append(errs, fmt.Errorf("two holders of %s's turn at once", key))
			mu.Unlock()
		}
		turn.Set(i)
		if got := q.Holder(key); got != i {
			mu.Lock()
			errs = append(errs, fmt.Errorf("Holder = %d, want %d", got, i))
			mu.Unlock()
		}
		for range spins {
			runtime.Gosched()
		}
		inside.Add(-1)
		turn.Done()
	}
	cancelled := make([]bool, n)
	start := make(chan struct{}) // closed when every waiter has queued
	for i := range n {
		ctx, cancel := context.WithCancel(context.Background())
		giveUp := rng.IntN(3) == 0
		cancelled[i] = giveUp
		spins, cancelAfter := rng.IntN(20), rng.IntN(40)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			if giveUp {
				go func() {
					<-start
					for range cancelAfter {
						runtime.Gosched()
					}
					cancel()
				}()
			}
			turn, err := q.Wait(ctx, key)
			switch {
			case err == nil:
				mu.Lock()
				granted = append(granted, i)
				mu.Unlock()
				hold(turn, i+1, spins)
			case !giveUp || !errors.Is(err, context.Canceled):
				mu.Lock()
				errs = append(errs, fmt.Errorf("waiter %d: %v", i, err))
				mu.Unlock()
			}
		}()
		// Arrival order is the order of this loop: nobody leaves before
		// start closes, so waiter i has queued when i+1 wait.
		deadline := time.Now().Add(10 * time.Second)
		for q.Waiting(key) != i+1 {
			if time.Now().After(deadline) {
				return fmt.Errorf("waiter %d did not queue", i)
			}
			runtime.Gosched()
		}
	}
	close(start)
	hold(first, 0, rng.IntN(20))

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		return fmt.Errorf("waiters still waiting: a hand-off was lost (granted so far %v)", granted)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for j := 1; j < len(granted); j++ {
		if granted[j] < granted[j-1] {
			return fmt.Errorf("turns out of arrival order: %v", granted)
		}
	}
	got := map[int]bool{}
	for _, i := range granted {
		got[i] = true
	}
	for i := range n {
		if !cancelled[i] && !got[i] {
			return fmt.Errorf("waiter %d never got the turn (granted %v)", i, granted)
		}
	}
	if q.Waiting(key) != 0 || q.Holder(key) != 0 {
		return fmt.Errorf("round left state behind: %d waiting", q.Waiting(key))
	}
	return nil
}

// TestEnterKeepsPlace: a place taken by Enter is served in the order of
// entry, before a Wait that came after it even if the place's own Wait
// is called later, and a place whose Wait gives up passes the turn on.
func TestEnterKeepsPlace(t *testing.T) {
	var q driver.Queue[struct{}]
	if p := q.Enter("free"); true {
		turn, err := p.Wait(context.Background())
		if err != nil {
			t.Fatalf("Wait of a place entered on a free key: %v", err)
		}
		turn.Done()
	}
	first, _ := q.Try("k")
	placed := q.Enter("k")
	gaveUp := q.Enter("k")
	later := make(chan *driver.Turn[struct{}], 1)
	go func() {
		turn, err := q.Wait(context.Background(), "k")
		if err != nil {
			panic(err)
		}
		later <- turn
	}()
	waitFor(t, "the later waiter to queue", func() bool { return q.Waiting("k") == 3 })
	first.Done()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := gaveUp.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait of a place under an ended context: %v", err)
	}
	select {
	case <-later:
		t.Fatal("a Wait that came after a place was served before it")
	default:
	}
	turn, err := placed.Wait(context.Background())
	if err != nil {
		t.Fatalf("Wait of the first place: %v", err)
	}
	turn.Done()
	(<-later).Done()
	if q.Len() != 0 {
		t.Fatalf("Len = %d after every Done, want 0", q.Len())
	}
}
