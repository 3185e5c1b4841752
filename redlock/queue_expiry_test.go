package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/testserver"
)

// A waiting try with a short TTL, refused by a reservation, does not cut
// short the queue of waiters that found a long grant: their entries (and
// the waiting flag) must outlive the grant they sleep on, or the next
// release wakes nobody and they sleep until their fallback timers.
func TestShortTryDoesNotShortenQueue(t *testing.T) {
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b := &Backend{cfg: config{prefix: DefaultPrefix}}
	k := b.keysFor("queue-expiry")
	if err := rdb.Set(ctx, b.marker(), "ok", 0).Err(); err != nil {
		t.Fatal(err)
	}
	acquire := func(secret string, ttl time.Duration, member string, ticket int) int64 {
		t.Helper()
		res, err := acquireScript.Run(ctx, rdb, []string{k.lock, k.token, k.tomb(secret), b.marker(), k.queue, k.waiting, k.woken, k.watched},
			secret, ceilMillis(ttl), "o", ceilMillis(queueSlack), member, ticket, "1").Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if st := acquire("holder", 10*time.Minute, "", 0); st != voteGranted {
		t.Fatalf("holder: %d", st)
	}
	if acquire("a", 10*time.Minute, "a|1", 1) != voteHeld || acquire("c", 10*time.Minute, "c|1", 3) != voteHeld {
		t.Fatal("waiters not queued")
	}
	// The holder's release woke a and keeps the node for it (nobody
	// listens for "a" here, so set the state that release leaves).
	if err := rdb.Del(ctx, k.lock).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZRem(ctx, k.queue, "a|1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, k.woken, "a|1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if st := acquire("b", time.Second, "b|1", 2); st != voteReserved {
		t.Fatalf("short try: %d, want RESERVED", st)
	}
	for _, key := range []string{k.queue, k.waiting} {
		if d, _ := rdb.PTTL(ctx, key).Result(); d < 5*time.Minute {
			t.Errorf("%s expires in %v after a 1s try, before the 10m grant its waiters found", key, d)
		}
	}
}
