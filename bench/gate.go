package bench

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// gateSettle, in holds, is how long a gate keeps the key after the last
// goroutine behind it has called Lock: time for that call's request to
// reach the service and queue there (a round trip or two, and the
// scheduling of many goroutines on a busy machine), and for a polling
// waiter to have tried at least once.
const gateSettle = 20

// gated holds key through holder while n goroutines run ask(0..n-1), each
// of which asks for key first; it releases key gateSettle holds after the
// last of them started, and returns once all have returned. Every ask thus
// finds the key held, and waits as a process does that finds it contended.
func (r *Runner) gated(runCtx, ctx context.Context, holder Locker, key string, n int, ask func(i int) error) error {
	u, err := holder.Lock(runCtx, key)
	if err != nil {
		return err
	}
	var (
		started  atomic.Int32
		allAsked = make(chan struct{})
		done     = make(chan error, 1)
	)
	go func() {
		done <- parallel(n, n, func(i int) error {
			if int(started.Add(1)) == n {
				close(allAsked)
			}
			return ask(i)
		})
	}()
	<-allAsked // every worker takes one i before its ask, whatever the others do
	time.Sleep(gateSettle * r.p.Hold)
	return errors.Join(u(ctx), <-done)
}
