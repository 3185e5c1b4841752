package driver_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/driver"
)

var errTrackerClosed = driver.ClosedError("testlock")

// Wait returns only once every goroutine started with Go and GoAlways has
// returned, GoAlways's started between Shut and Wait included.
func TestTrackerWaitWaits(t *testing.T) {
	tr := driver.NewTracker(errTrackerClosed)
	release := make(chan struct{})
	var finished atomic.Int32
	for range 3 {
		if !tr.Go(func() {
			<-release
			finished.Add(1)
		}) {
			t.Fatal("Go on an open Tracker started nothing")
		}
	}
	if !tr.Shut() {
		t.Fatal("the first Shut says the Tracker was already shut")
	}
	tr.GoAlways(func() {
		<-release
		finished.Add(1)
	})
	waited := make(chan int32)
	go func() {
		tr.Wait()
		waited <- finished.Load()
	}()
	// Wait cannot return yet: every goroutine is blocked on release. A
	// Wait that did not wait would be seen here, most of the time, and
	// below every time it returned before the last goroutine ended.
	select {
	case n := <-waited:
		t.Fatalf("Wait returned while the goroutines ran (%d of 4 finished)", n)
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	if n := <-waited; n != 4 {
		t.Fatalf("Wait returned when %d of 4 goroutines had finished", n)
	}
	goleak.VerifyNone(t)
}

// After Shut, CheckOpen fails with the package's ErrClosed, Go starts
// nothing (from inside a tracked goroutine too), and Shut again says so.
func TestTrackerAfterShut(t *testing.T) {
	tr := driver.NewTracker(errTrackerClosed)
	if err := tr.CheckOpen(); err != nil || tr.Closed() {
		t.Fatalf("a new Tracker: CheckOpen %v, Closed %v", err, tr.Closed())
	}
	inside := make(chan bool)
	proceed := make(chan struct{})
	tr.Go(func() {
		<-proceed
		inside <- tr.Go(func() { t.Error("a goroutine started after Shut ran") })
	})
	if !tr.Shut() {
		t.Fatal("the first Shut says the Tracker was already shut")
	}
	close(proceed)
	if <-inside {
		t.Error("Go from a tracked goroutine after Shut started f")
	}
	tr.Wait()
	if tr.Go(func() { t.Error("a goroutine started after Close ran") }) {
		t.Error("Go after Shut and Wait started f")
	}
	err := tr.CheckOpen()
	if err != errTrackerClosed || !errors.Is(err, driver.ErrClosed) || err.Error() != "testlock: backend closed" {
		t.Errorf("CheckOpen after Shut = %v, want the package's ErrClosed", err)
	}
	if !tr.Closed() || tr.Shut() {
		t.Errorf("after Shut: Closed %v, a second Shut says it closed the Tracker", tr.Closed())
	}
	tr.Wait() // again: nothing to wait for
	goleak.VerifyNone(t)
}

// Go racing Shut: whatever Go started, Wait waits for; whatever it
// refused, never runs. Run with -race.
func TestTrackerGoRacesShut(t *testing.T) {
	for range 50 {
		tr := driver.NewTracker(errTrackerClosed)
		var started, ran atomic.Int32
		var callers sync.WaitGroup
		for range 8 {
			callers.Go(func() {
				for range 20 {
					if tr.Go(func() { ran.Add(1) }) {
						started.Add(1)
					}
				}
			})
		}
		tr.Shut()
		tr.Wait()
		atWait := ran.Load()
		// Callers still running are refused, and their refusals run nothing.
		callers.Wait()
		if atWait != started.Load() || ran.Load() != atWait {
			t.Fatalf("%d goroutines had run when Wait returned, %d later; %d were started", atWait, ran.Load(), started.Load())
		}
	}
	goleak.VerifyNone(t)
}

// Work counted by Enter holds Wait until its Leave; Enter after Shut
// counts nothing.
func TestTrackerEnter(t *testing.T) {
	tr := driver.NewTracker(errTrackerClosed)
	if !tr.Enter() {
		t.Fatal("Enter on an open Tracker counted nothing")
	}
	tr.Shut()
	if tr.Enter() {
		t.Fatal("Enter after Shut counted work")
	}
	waited := make(chan struct{})
	go func() {
		tr.Wait()
		close(waited)
	}()
	select {
	case <-waited:
		t.Fatal("Wait returned before the entered work left")
	case <-time.After(50 * time.Millisecond):
	}
	tr.Leave()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return in 10s after Leave")
	}
}
