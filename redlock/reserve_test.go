package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/internal/testserver"
)

// A release that wakes a waiter keeps the node for it for a moment: a try
// of anyone else finds the node held until the woken waiter's try takes
// it, or until the reservation lapses (so that a woken waiter that never
// comes delays the others by the reservation only).
func TestReleaseReservesForWokenWaiter(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx := context.Background()
	b := &Backend{cfg: config{prefix: DefaultPrefix}}
	k := b.keysFor("reserve")
	if err := rdb.Set(ctx, b.marker(), "ok", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// A Backend "w" listens on its wake channel; its waiter "w|1" waits.
	ps := rdb.Subscribe(ctx, b.cfg.prefix+wakeName+"w")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	acquire := func(secret, member string) int64 {
		t.Helper()
		res, err := acquireScript.Run(ctx, rdb, []string{k.lock, k.token, k.tomb(secret), b.marker(), k.queue, k.waiting, k.woken},
			secret, 60000, "o", ceilMillis(queueSlack), member, 1, "1").Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	release := func(secret string, reserve time.Duration) {
		t.Helper()
		if st, err := b.releaseOp(k, secret, time.Minute, false, "", reserve)(ctx, rdb); err != nil || st != releaseReleased {
			t.Fatalf("release: %d, %v", st, err)
		}
	}
	if st := acquire("holder", ""); st != voteGranted {
		t.Fatalf("holder: %d", st)
	}
	if st := acquire("waiter", "w|1"); st != voteHeld {
		t.Fatalf("waiter: %d, want HELD", st)
	}
	release("holder", time.Minute)
	if st := acquire("newcomer", "n|1"); st != voteHeld {
		t.Fatalf("a newcomer right after a release that woke a waiter: %d, want HELD (reserved for the woken waiter)", st)
	}
	if st := acquire("waiter", "w|1"); st != voteGranted {
		t.Fatalf("the woken waiter: %d, want GRANTED", st)
	}
	if n, _ := rdb.Exists(ctx, k.woken).Result(); n != 0 {
		t.Fatalf("the reservation outlives the woken waiter's grant")
	}
	// The newcomer queued when refused: this release wakes it, and a
	// reservation it does not take lapses.
	release("waiter", 50*time.Millisecond)
	deadline := time.Now().Add(30 * time.Second)
	for acquire("third", "") != voteGranted {
		if time.Now().After(deadline) {
			t.Fatal("the reservation for a waiter that never came did not lapse")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
