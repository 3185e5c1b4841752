package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// Close racing acquisitions of every kind (waiting for a held key, trying
// a free one, a set) at any point of theirs: each one returns, with a lock
// or with ErrClosed (or ErrNotAcquired for a try), and nothing is left
// held. A wait that Close did not end would keep the round from finishing.
func TestCloseRacesAcquires(t *testing.T) {
	ctx := context.Background()
	for i := range 200 {
		srv := memlock.New()
		other := newClient(t, srv)
		held, err := other.Acquire(ctx, "held")
		if err != nil {
			t.Fatal(err)
		}
		c, _ := distlock.New(srv)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 6 {
			wg.Go(func() {
				var err error
				switch g % 3 {
				case 0:
					var l *distlock.Lock
					if l, err = c.Acquire(ctx, "held"); err == nil {
						l.Release(ctx)
					}
				case 1:
					var l *distlock.Lock
					if l, err = c.TryAcquire(ctx, fmt.Sprint("free", g)); err == nil {
						l.Release(ctx)
					}
				default:
					var s *distlock.LockSet
					if s, err = c.AcquireAll(ctx, []string{"a", "b", fmt.Sprint("free", g)}); err == nil {
						s.Release(ctx)
					}
				}
				if err != nil && !errors.Is(err, distlock.ErrClosed) && !errors.Is(err, distlock.ErrNotAcquired) {
					errs <- err
				}
			})
		}
		wg.Go(func() {
			for range i % 13 {
				_ = held.Token()
			}
			if err := c.Close(ctx); err != nil {
				errs <- err
			}
		})
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("round %d: an acquisition still runs a minute after Close", i)
		}
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", i, err)
		}
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if hs, _ := srv.List(ctx, ""); len(hs) != 0 {
			t.Fatalf("round %d: left behind: %+v", i, hs)
		}
	}
}
