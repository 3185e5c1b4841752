package pglock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// errGranted is what a waiter reports when its Acquire, racing its
// cancellation, was granted the key (and released it again).
var errGranted = errors.New("granted")

// cancelMoment is when a round of TestCancelledAcquireLeavesNothing
// cancels its waiter.
type cancelMoment int

const (
	cancelQueued cancelMoment = iota // once it waits in the server, before the release
	cancelEarly                      // at a random moment of its start, before the release
	cancelRacing                     // racing the release
	cancelMoments
)

var cancelMomentNames = [cancelMoments]string{"once queued", "early", "racing the release"}

// A waiting Acquire whose context ends leaves nothing behind once it has
// returned, in every mode: after the holder releases, another Backend's
// try is granted the key at once, neither refused for a grant the waiter
// was given nor for its place in the queue. Each round cancels a waiter
// before the holder releases, once the waiter waits in the server (it is
// between tries, or in the middle of one) or at a random moment of its
// start (its statement may not have reached the server yet), or racing
// the release (the waiter may be granted the key, and then releases it).
// The waiters of lease mode poll often, so that cancellations land in
// their tries as well as between them.
func TestCancelledAcquireLeavesNothing(t *testing.T) {
	const rounds = 30 // of each moment
	bouncer := testserver.StartPgBouncer(t, server)
	admin := newPool(t, server)
	poll := 5 * time.Millisecond
	for _, tc := range []struct {
		name       string
		newBackend func(t *testing.T) *pglock.Backend
		waitingSQL string // counts the waiters of key $1 in the server
	}{
		{"Session", func(t *testing.T) *pglock.Backend { return newBackend(t, server) }, waitingSQL},
		{"Lease", func(t *testing.T) *pglock.Backend {
			return newLeaseBackend(t, server.DSN, pglock.WithPollInterval(poll))
		}, queuedSQL},
		{"LeasePgBouncerPolling", func(t *testing.T) *pglock.Backend {
			return newLeaseBackend(t, bouncer.DSN, pglock.WithPollInterval(poll))
		}, queuedSQL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, run := testCtx(t), rand.Text()[:8] // keys of their own in each run of -count
			holder, waiter, other := tc.newBackend(t), tc.newBackend(t), tc.newBackend(t)
			var refused [cancelMoments]int
			var first error
			for round := range int(cancelMoments) * rounds {
				moment := cancelMoment(round % int(cancelMoments))
				key := fmt.Sprintf("cancelled/%s/%s/%d", run, t.Name(), round)
				l := acquire(t, holder, ctx, key, driver.AcquireOptions{})
				wctx, cancel := context.WithCancel(ctx)
				got := make(chan error, 1)
				go func() {
					w, err := waiter.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
					if err == nil {
						if err = w.Release(ctx); err == nil {
							err = errGranted
						}
					}
					got <- err
				}()
				if moment == cancelEarly {
					time.Sleep(mathrand.N(20 * time.Millisecond))
				} else {
					eventually(t, 10*time.Second, "the waiter waits in the server", func() bool {
						return count(t, admin, tc.waitingSQL, key) == 1
					})
					// Vary where the cancellation lands in the waiter's
					// cycle of tries and pauses.
					time.Sleep(mathrand.N(2 * poll))
				}
				if moment == cancelRacing {
					go func() {
						time.Sleep(mathrand.N(time.Millisecond))
						cancel()
					}()
				} else {
					cancel()
					if err := <-got; !errors.Is(err, context.Canceled) {
						t.Fatalf("round %d: cancelled Acquire: %v, want context.Canceled", round, err)
					}
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("round %d: release: %v", round, err)
				}
				if moment == cancelRacing {
					if err := <-got; err != errGranted && !errors.Is(err, context.Canceled) {
						t.Fatalf("round %d: Acquire racing its cancellation: %v", round, err)
					}
				}
				cancel()
				// At once: a try, with no retries.
				tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
				o, err := other.Acquire(tctx, key, driver.AcquireOptions{TTL: time.Minute})
				tcancel()
				if err != nil {
					refused[moment]++
					if first == nil {
						first = fmt.Errorf("round %d, cancelled %s: %w", round, cancelMomentNames[moment], err)
					}
					continue
				}
				if err := o.Release(ctx); err != nil {
					t.Fatalf("round %d: release: %v", round, err)
				}
			}
			if refused != [cancelMoments]int{} {
				t.Errorf("another Backend's try was refused after a cancelled Acquire had returned, in %d, %d and %d of %d rounds cancelled %s, %s and %s; first: %v",
					refused[0], refused[1], refused[2], rounds, cancelMomentNames[0], cancelMomentNames[1], cancelMomentNames[2], first)
			}
		})
	}
}

// queuedSQL counts the live waiters of key $1 in the lease queue.
const queuedSQL = `SELECT count(*) FROM distlock_lease_waiter WHERE key = $1 AND expires > now()`
