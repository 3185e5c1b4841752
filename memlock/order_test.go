package memlock_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// A reader that finds a writer acquiring the key (its try is refused) is
// served after that writer: it takes its place in line behind it, with
// no moment between the writer's being counted and its place in line in
// which a reader could be served first. Rounds make the race likely: a
// writer preempted between the two, as a loaded machine does, would let
// the reader pass.
func TestReaderBehindAcquiringWriter(t *testing.T) {
	b := memlock.New()
	t.Cleanup(func() { b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := driver.AcquireOptions{TTL: time.Minute, Wait: true}
	try := driver.AcquireOptions{TTL: time.Minute}
	type result struct {
		l   driver.Lease
		err error
	}
	for round := range 2000 {
		key := fmt.Sprintf("k%d", round)
		r, err := b.AcquireShared(ctx, key, opts)
		if err != nil {
			t.Fatal(err)
		}
		writer := make(chan result, 1)
		go func() {
			l, err := b.Acquire(ctx, key, opts)
			writer <- result{l, err}
		}()
		for { // until the writer is counted: a reader's try is refused
			l, err := b.AcquireShared(ctx, key, try)
			if err != nil {
				break
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			runtime.Gosched()
		}
		reader := make(chan result, 1)
		go func() {
			l, err := b.AcquireShared(ctx, key, opts)
			reader <- result{l, err}
		}()
		for memlock.Waiting(b, key) < 1 && len(reader) == 0 { // the reader has asked
			runtime.Gosched()
		}
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case w := <-writer: // the reader cannot be granted while it holds
			if w.err != nil {
				t.Fatalf("round %d: writer: %v", round, w.err)
			}
			if err := w.l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			rr := <-reader
			if rr.err != nil {
				t.Fatalf("round %d: reader: %v", round, rr.err)
			}
			if err := rr.l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case rr := <-reader:
			if rr.l != nil {
				rr.l.Release(ctx)
			}
			if w := <-writer; w.l != nil {
				w.l.Release(ctx)
			}
			t.Fatalf("round %d: a reader that found the writer acquiring was granted before it (%v)", round, rr.err)
		}
	}
}
