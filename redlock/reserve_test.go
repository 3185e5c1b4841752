package redlock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/testserver"
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
		res, err := acquireScript.Run(ctx, rdb, []string{k.lock, k.token, k.tomb(secret), b.marker(), k.queue, k.waiting, k.woken, k.watched},
			secret, 60000, "o", ceilMillis(queueSlack), member, 1, "1").Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	release := func(secret string, reserve time.Duration) {
		t.Helper()
		if st, err := b.releaseOp(k, k.credential([]byte(secret)), time.Minute, false, "", reserve)(ctx, rdb); err != nil || st != releaseReleased {
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
	if st := acquire("newcomer", "n|1"); st != voteReserved {
		t.Fatalf("a newcomer right after a release that woke a waiter: %d, want RESERVED (kept for the woken waiter)", st)
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

// A release that wakes a waiter which has returned meanwhile (it gave up,
// its leaving not yet done) does not leave the node kept for it and the
// others to their fallback timers: the waiter's Backend passes the turn
// to the next waiter.
func TestWakeOfGoneWaiterPassesTurn(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := New([]Node{rdb})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sub, err := b.subscriber()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.ready:
	case <-ctx.Done():
		t.Fatal("wake channel not subscribed")
	}
	k := b.keysFor("pass")
	if err := rdb.Set(ctx, b.marker(), "ok", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The next waiter, of Backend "x", listens here.
	ps := rdb.Subscribe(ctx, b.cfg.prefix+wakeName+"x")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	acquire := func(secret, member string, ticket int) int64 {
		t.Helper()
		res, err := acquireScript.Run(ctx, rdb, []string{k.lock, k.token, k.tomb(secret), b.marker(), k.queue, k.waiting, k.woken, k.watched},
			secret, 60000, "o", ceilMillis(queueSlack), member, ticket, "1").Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if st := acquire("holder", "", 0); st != voteGranted {
		t.Fatalf("holder: %d", st)
	}
	// First in line, but it gave up: its Acquire returned.
	gone := sub.add()
	sub.remove(gone, true)
	if acquire("gone", gone.member, 1) != voteHeld || acquire("next", "x|1", 2) != voteHeld {
		t.Fatal("waiters not queued")
	}
	if st, err := b.releaseOp(k, k.credential([]byte("holder")), time.Minute, false, "", time.Minute)(ctx, rdb); err != nil || st != releaseReleased {
		t.Fatalf("release: %d, %v", st, err)
	}
	msg, err := ps.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("the next waiter was not woken: %v", err)
	}
	if m, _, _ := strings.Cut(msg.Payload, " "); m != "x|1" {
		t.Fatalf("woke %q, want x|1", msg.Payload)
	}
	if v, _ := rdb.Get(ctx, k.woken).Result(); v != "x|1" {
		t.Fatalf("the node is kept for %q, want the next waiter", v)
	}
}
