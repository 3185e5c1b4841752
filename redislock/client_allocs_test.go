package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// An uncontended cycle through a distlock.Client over Redis, with a context
// that never ends (the common case), allocates no more than the Backend's
// own cycle and what the Client needs for the grant (the grant, its OnLost
// callback and the wait's context): not a cancellable context per acquire,
// whose Done channel go-redis would make at its first select on it, nor
// the lock's own context, which nobody asks for here. The Client's share
// is the difference of two cycles with the same commands, whatever
// go-redis allocates.
//
// The Backend's bound is tight: it includes go-redis's share (10 of its 15
// allocations with v9.23), so measure again when go-redis changes. The
// Backend's code is shaped to save what the bound leaves no room for:
//   - the attempt holds its lease (attempt.lease), not a lease apart: one;
//   - keysFor cuts the names of a lock's keys from one string, and those
//     that hold the grant's secret from one buffer, into which the secret
//     is drawn: ten, as strings and a secret of their own;
//   - scriptArgs and the value's end a try sends (attempt.rest) are
//     pointers to the strings and redact.Secret values, not the values:
//     converting a pointer to an interface allocates nothing, a string its
//     header: eight;
//   - runScript sends the command with the slice it is given, not a copy:
//     one per script call.
//
// The tokens start above 255, as in a key used for a while: go-redis boxes
// the reply's token in an allocation of its own then, and not below.
func TestClientCycleAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account")
	}
	srv := startRedis(t)
	ctx := context.Background()
	b := newBackend(t, srv.Addr)
	c, err := distlock.New(b, distlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rc := newClient(t, srv.Addr)
	allocs := func(t *testing.T, key string, cycle func(key string) error) float64 {
		if err := rc.Set(ctx, redislock.DefaultPrefix+redislock.HashTag(key)+":token", 1000, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := cycle(key); err != nil { // loads the scripts, checks the eviction policy
			t.Fatal(err)
		}
		return testing.AllocsPerRun(200, func() {
			if err := cycle(key); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, wait := range []bool{false, true} {
		name, acquire := "TryAcquire", c.TryAcquire
		if wait {
			name, acquire = "Acquire", c.Acquire
		}
		t.Run(name, func(t *testing.T) {
			backend := allocs(t, "client-allocs/backend/"+name, func(key string) error {
				l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: wait})
				if err != nil {
					return err
				}
				return l.Release(ctx)
			})
			client := allocs(t, "client-allocs/client/"+name, func(key string) error {
				l, err := acquire(ctx, key)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			})
			t.Logf("%.1f allocations per cycle through the Client, %.1f through the Backend alone", client, backend)
			const backendBound, clientShare = 15, 3
			if backend > backendBound {
				t.Errorf("%.1f allocations per Backend cycle, want at most %d", backend, backendBound)
			}
			if client-backend > clientShare {
				t.Errorf("the Client adds %.1f allocations per cycle, want at most %d", client-backend, clientShare)
			}
		})
	}
}
