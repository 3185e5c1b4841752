package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/testserver"
)

// semKey is the Redis key of the semaphore at key with suffix, per the
// documented layout.
func semKey(key, suffix string) string {
	return redislock.DefaultPrefix + redislock.HashTag(key) + suffix
}

// longLiveness keeps a waiter's fallback timer (a third of its liveness,
// or the first permit's expiry) far beyond a test: only a wake-up can
// serve it in time.
var longLiveness = redislock.WithWaiterLiveness(time.Hour)

// permitResult is what a waiting AcquirePermit returned.
type permitResult struct {
	l   driver.Lease
	err error
}

// waitPermit starts a waiting AcquirePermit of a limit-1 semaphore on b.
func waitPermit(ctx context.Context, b *redislock.Backend, key string) <-chan permitResult {
	got := make(chan permitResult, 1)
	go func() {
		l, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		got <- permitResult{l, err}
	}()
	return got
}

// Waiters are served in arrival order, over Backends of their own; a
// permit given back wakes the first waiter alone (one message on the wake
// channels, naming it); a newcomer cannot take a permit while others wait.
func TestPermitLineOrder(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	const n = 4
	key := "permit-line"
	holder := newBackend(t, srv.Addr, longLiveness)
	l, err := holder.AcquirePermit(ctx, key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var got []<-chan permitResult
	for i := range n {
		got = append(got, waitPermit(ctx, newBackend(t, srv.Addr, longLiveness), key))
		eventually(t, 20*time.Second, "the waiter in line", func() bool {
			return admin.ZCard(ctx, semKey(key, ":line")).Val() == int64(i+1)
		})
	}
	first := admin.ZRange(ctx, semKey(key, ":line"), 0, 0).Val()[0]

	// Every wake channel, heard by the test.
	wakes := admin.PSubscribe(ctx, redislock.DefaultPrefix+"waiters:*")
	defer wakes.Close()
	if _, err := wakes.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if q, err := newBackend(t, srv.Addr).AcquirePermit(ctx, key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			q.Release(ctx)
		}
		t.Fatalf("a newcomer's try while %d wait: %v; want ErrNotAcquired", n, err)
	}
	var held []driver.Lease
	for i, ch := range got {
		var r permitResult
		select {
		case r = <-ch:
		case <-time.After(20 * time.Second):
			t.Fatalf("waiter %d not served within 20s of the permit given back", i)
		}
		if r.err != nil {
			t.Fatalf("waiter %d: %v", i, r.err)
		}
		for j, other := range got[i+1:] {
			select {
			case r := <-other:
				t.Fatalf("waiter %d served before waiter %d: %v, %v", i+1+j, i, r.l, r.err)
			default:
			}
		}
		if i == 0 {
			// The release and the first waiter's grant are done: every
			// wake-up they sent is before this marker on the pattern.
			marker := redislock.DefaultPrefix + "waiters:marker"
			if err := admin.Publish(ctx, marker, "end").Err(); err != nil {
				t.Fatal(err)
			}
			var woken []string
			for {
				m, err := wakes.ReceiveMessage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if m.Channel == marker {
					break
				}
				woken = append(woken, m.Payload)
			}
			if len(woken) != 1 || woken[0] != first {
				t.Fatalf("a permit given back with %d waiters woke %q; want the first waiter alone, %q", n, woken, first)
			}
		}
		held = append(held, r.l)
		if err := r.l.Release(ctx); err != nil {
			t.Fatalf("waiter %d: Release: %v", i, err)
		}
	}
	for i := 1; i < len(held); i++ {
		if held[i].Token() <= held[i-1].Token() {
			t.Fatalf("tokens %d then %d", held[i-1].Token(), held[i].Token())
		}
	}
}

// A waiter whose process is gone (nobody hears its Backend's wake
// channel) is dropped by the release that would wake it, which wakes the
// next one: a dead waiter first in line, its liveness an hour away, does
// not hold the line up. A waiter whose liveness lapsed is dropped by the
// next script.
func TestPermitDeadWaiterSkipped(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "permit-dead-waiter"
	holder := newBackend(t, srv.Addr, longLiveness)
	l, err := holder.AcquirePermit(ctx, key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	now, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	line, alive := semKey(key, ":line"), semKey(key, ":line-alive")
	for _, w := range []struct {
		id       string
		seq      float64
		deadline time.Time
	}{{"LAPSED:x", 1, now.Add(-time.Second)}, {"DEAD:x", 2, now.Add(time.Hour)}} {
		admin.ZAdd(ctx, line, redis.Z{Score: w.seq, Member: w.id})
		admin.ZAdd(ctx, alive, redis.Z{Score: float64(w.deadline.UnixMilli()), Member: w.id})
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	got := waitPermit(wctx, newBackend(t, srv.Addr, longLiveness), key)
	eventually(t, 20*time.Second, "the live waiter in line behind the dead one", func() bool {
		ids := admin.ZRange(ctx, line, 0, -1).Val()
		return len(ids) == 2 && ids[0] == "DEAD:x"
	})
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the live waiter, behind a dead one: %v", r.err)
	}
	if err := r.l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := admin.Exists(ctx, line, alive).Val(); n != 0 {
		t.Fatalf("%d line keys left", n)
	}
}

// A waiter whose context ends leaves the line at once, and with nothing
// else live or awaited the semaphore stores no limit. Every key of the
// semaphore but its token counter and the record of released permits is
// gone once its last permit is given back, and those expire: the first
// with the permits' TTL, the line's with the waiters' liveness.
func TestPermitCancelledWaiterLeavesLine(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "permit-cancelled"
	const ttl, liveness = 10 * time.Second, 3 * time.Second
	holder := newBackend(t, srv.Addr)
	l, err := holder.AcquirePermit(ctx, key, driver.Semaphore{Limit: 1, Slots: true}, driver.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := newBackend(t, srv.Addr, redislock.WithWaiterLiveness(liveness)).AcquirePermit(wctx,
			key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: ttl, Wait: true})
		got <- err
	}()
	eventually(t, 20*time.Second, "the waiter in line", func() bool { return admin.ZCard(ctx, semKey(key, ":line")).Val() == 1 })
	for suffix, most := range map[string]time.Duration{
		":permits": ttl, ":permit-grants": ttl, ":limit": ttl, ":line": liveness, ":line-alive": liveness,
	} {
		if d := admin.PTTL(ctx, semKey(key, suffix)).Val(); d <= 0 || d > most {
			t.Errorf("PTTL of %s: %v; want in (0, %v]", suffix, d, most)
		}
	}
	cancel()
	if err := <-got; !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled waiter: %v; want ErrNotAcquired and context.Canceled", err)
	}
	if n := admin.Exists(ctx, semKey(key, ":line"), semKey(key, ":line-alive")).Val(); n != 0 {
		t.Fatalf("%d line keys left after the waiter's Acquire returned", n)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := holder.Permits(ctx, key)
	if err != nil || st.Limit != 0 || len(st.Holders) != 0 || st.Waiting != 0 {
		t.Fatalf("Permits: %+v, %v; want nothing", st, err)
	}
	keys := admin.Keys(ctx, redislock.DefaultPrefix+redislock.HashTag(key)+"*").Val()
	for _, k := range keys {
		if strings.HasSuffix(k, ":token") {
			continue
		}
		if !strings.HasSuffix(k, ":permits-done") {
			t.Errorf("key %s left behind", k)
		} else if d := admin.PTTL(ctx, k).Val(); d <= 0 || d > ttl {
			t.Errorf("PTTL of %s: %v; want in (0, %v]", k, d, ttl)
		}
	}
}

// Permits and locks of one key draw their tokens from one counter: each
// grant's token is above every earlier one, a lock's or a permit's.
func TestPermitTokensSharedWithLocks(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	b := newBackend(t, srv.Addr)
	key := "permit-tokens"
	opts := driver.AcquireOptions{TTL: time.Minute}
	var last uint64
	for i := range 6 {
		var l driver.Lease
		var err error
		if i%2 == 0 {
			l, err = b.Acquire(ctx, key, opts)
		} else {
			l, err = b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 2}, opts)
		}
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Fatalf("grant %d: token %d after %d", i, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := admin.Get(ctx, semKey(key, ":token")).Uint64(); err != nil || v != last {
		t.Fatalf("the key's counter: %d, %v; want %d", v, err, last)
	}
}

// RefreshAll refreshes permits with locks, and reports a permit that
// lapsed as lost, leaving the others extended.
func TestPermitRefreshAll(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	b := newBackend(t, srv.Addr)
	opts := driver.AcquireOptions{TTL: 10 * time.Second}
	lock, err := b.Acquire(ctx, "refresh-lock", opts)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := b.AcquirePermit(ctx, "refresh-kept", driver.Semaphore{Limit: 2}, opts)
	if err != nil {
		t.Fatal(err)
	}
	lapsed, err := b.AcquirePermit(ctx, "refresh-lapsed", driver.Semaphore{Limit: 2}, opts)
	if err != nil {
		t.Fatal(err)
	}
	lapsePermits(t, admin, "refresh-lapsed")
	res := b.RefreshAll(ctx, []driver.Lease{kept, lock, lapsed}, time.Minute)
	if res[0].Err != nil || res[0].Validity.TTL != time.Minute || res[1].Err != nil || res[1].Validity.TTL != time.Minute {
		t.Fatalf("RefreshAll of a live permit and lock: %+v", res[:2])
	}
	if !errors.Is(res[2].Err, distlock.ErrLockLost) {
		t.Fatalf("RefreshAll of a lapsed permit: %v; want ErrLockLost", res[2].Err)
	}
	now := admin.Time(ctx).Val()
	score := admin.ZRangeWithScores(ctx, semKey("refresh-kept", ":permits"), 0, -1).Val()
	if len(score) != 1 || score[0].Score < float64(now.Add(30*time.Second).UnixMilli()) {
		t.Fatalf("the refreshed permit: %v; want its expiry about a minute from now", score)
	}
	for _, l := range []driver.Lease{lock, kept} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := lapsed.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("Release of a lapsed permit: %v; want ErrLockLost", err)
	}
}

// WithWaitReplicas holds for permits: a permit is confirmed by a replica,
// or given back and reported unavailable.
func TestPermitWaitReplicas(t *testing.T) {
	primary := startRedis(t)
	replica := startRedis(t, testserver.WithRedisReplicaOf(primary))
	ctx, admin, rc := testCtx(t), newClient(t, primary.Addr), newClient(t, replica.Addr)
	sem, opts := driver.Semaphore{Limit: 2}, driver.AcquireOptions{TTL: time.Minute}

	ok := newBackend(t, primary.Addr, redislock.WithWaitReplicas(1, 10*time.Second))
	l, err := ok.AcquirePermit(ctx, "replicated", sem, opts)
	if err != nil {
		t.Fatalf("AcquirePermit with 1 replica: %v", err)
	}
	if n := rc.ZCard(ctx, semKey("replicated", ":permits")).Val(); n != 1 {
		t.Errorf("the replica has %d permits; want the one granted", n)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	tooMany := newBackend(t, primary.Addr, redislock.WithWaitReplicas(2, 200*time.Millisecond))
	if l, err := tooMany.AcquirePermit(ctx, "unreplicated", sem, opts); !errors.Is(err, distlock.ErrUnavailable) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("AcquirePermit waiting for 2 replicas with 1: %v; want ErrUnavailable", err)
	}
	if n := admin.Exists(ctx, semKey("unreplicated", ":permits"), semKey("unreplicated", ":limit")).Val(); n != 0 {
		t.Errorf("a failed replicated AcquirePermit left %d keys behind", n)
	}
}
