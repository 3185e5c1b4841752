package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redislock"
)

// lockKey is the Redis key of the lock on key, per the documented layout.
func lockKey(key string) string { return redislock.DefaultPrefix + redislock.HashTag(key) + ":lock" }

func queueKey(key string) string { return redislock.DefaultPrefix + redislock.HashTag(key) + ":queue" }

func channelOf(key string) string {
	return redislock.DefaultPrefix + redislock.HashTag(key) + ":released"
}

// The guide's RenewingLock renews with an unchecked EXPIRE: after its own
// lease lapsed, it extends the next holder's. The baseline shows the bug
// with raw commands; the guard shows Refresh is owner-checked.
func TestRefreshAfterExpiryIsOwnerChecked(t *testing.T) {
	srv := startRedis(t)
	ctx, c := testCtx(t), newClient(t, srv.Addr)
	expired := func(k string) func() bool {
		return func() bool { return c.Exists(ctx, k).Val() == 0 }
	}

	// Baseline: A's lease lapses, B takes the key, A "renews" with PEXPIRE.
	raw := "baseline"
	if !c.SetNX(ctx, raw, "A", 50*time.Millisecond).Val() {
		t.Fatal("baseline: A's SET NX failed")
	}
	eventually(t, 10*time.Second, "A's raw lease lapses", expired(raw))
	if !c.SetNX(ctx, raw, "B", 2*time.Second).Val() {
		t.Fatal("baseline: B's SET NX failed")
	}
	if !c.PExpire(ctx, raw, time.Minute).Val() {
		t.Fatal("baseline: A's PEXPIRE did not apply")
	}
	if d := c.PTTL(ctx, raw).Val(); d <= 2*time.Second {
		t.Fatalf("baseline: B's PTTL %v; the unchecked PEXPIRE should have extended it", d)
	}
	t.Logf("baseline bites: A's unchecked PEXPIRE extended B's lock to %v", c.PTTL(ctx, raw).Val())

	// Guard.
	key := "owner-checked-refresh"
	ba, bb := newBackend(t, srv.Addr), newBackend(t, srv.Addr)
	la, err := ba.Acquire(ctx, key, distlock.AcquireOptions{TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "A's lease lapses", expired(lockKey(key)))
	lb, err := bb.Acquire(ctx, key, distlock.AcquireOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := la.Refresh(ctx, time.Minute); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("expired holder's Refresh: %v, want ErrLockLost", err)
	}
	if d := c.PTTL(ctx, lockKey(key)).Val(); d <= 0 || d > 2*time.Second {
		t.Errorf("B's PTTL after A's Refresh is %v, want at most B's own 2s", d)
	}
	// The batch path is owner-checked too.
	if res := ba.RefreshAll(ctx, []distlock.Lease{la}, time.Minute); !errors.Is(res[0].Err, distlock.ErrLockLost) {
		t.Errorf("A's RefreshAll: %v, want ErrLockLost", res[0].Err)
	}
	if d := c.PTTL(ctx, lockKey(key)).Val(); d <= 0 || d > 2*time.Second {
		t.Errorf("B's PTTL after A's RefreshAll is %v, want at most B's own 2s", d)
	}
	if res := bb.RefreshAll(ctx, []distlock.Lease{lb}, time.Minute); res[0].Err != nil {
		t.Errorf("B's RefreshAll: %v", res[0].Err)
	}
	if d := c.PTTL(ctx, lockKey(key)).Val(); d <= 2*time.Second {
		t.Errorf("B's own batched refresh did not extend its lock: PTTL %v", d)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A release reaches a waiter through pub/sub long before the TTL would,
// and one Backend serves many waiters over one pub/sub connection.
func TestPubSubHandOff(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	const ttl = 2 * time.Minute
	const waiters = 16
	key := "handoff"
	holder, b := newBackend(t, srv.Addr), newBackend(t, srv.Addr)
	lh, err := holder.Acquire(ctx, key, distlock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}

	wctx, cancel := context.WithTimeout(ctx, ttl/4)
	defer cancel()
	type grant struct {
		at    time.Time
		token uint64
		err   error
	}
	grants := make(chan grant, waiters)
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			l, err := b.Acquire(wctx, key, distlock.AcquireOptions{TTL: ttl, Wait: true})
			if err != nil {
				grants <- grant{err: err}
				return
			}
			grants <- grant{at: time.Now(), token: l.Token()}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
	}

	// One subscription and one pub/sub connection for all the waiters.
	eventually(t, 10*time.Second, "waiters subscribed", func() bool {
		n := admin.PubSubNumSub(ctx, channelOf(key)).Val()[channelOf(key)]
		return n == 1
	})
	if n := pubsubClients(t, admin); n != 1 {
		t.Errorf("%d pub/sub connections for %d waiters, want 1", n, waiters)
	}

	released := time.Now()
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	last := lh.Token()
	var latest time.Time
	for range waiters {
		g := <-grants
		if g.err != nil {
			t.Fatalf("waiter: %v", g.err)
		}
		if g.token <= lh.Token() {
			t.Errorf("token %d after %d", g.token, lh.Token())
		}
		last = max(last, g.token)
		latest = g.at
	}
	wg.Wait()
	if took := latest.Sub(released); took >= ttl/4 {
		t.Errorf("%d hand-offs took %v; the TTL is %v: waiters were not woken by the releases", waiters, took, ttl)
	} else {
		t.Logf("%d hand-offs in %v after the first release (TTL %v)", waiters, took, ttl)
	}
	eventually(t, 10*time.Second, "unsubscribed after the last waiter", func() bool {
		return admin.PubSubNumSub(ctx, channelOf(key)).Val()[channelOf(key)] == 0
	})
}

// pubsubClients counts the server's connections in pub/sub mode.
func pubsubClients(t *testing.T, c *redis.Client) int {
	t.Helper()
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if flags, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(flags, "P") {
				n++
			}
		}
	}
	return n
}

// Fair mode: waiters are served in arrival order, a newcomer cannot jump
// the queue, and a waiter whose process died is skipped after its liveness
// lapses.
func TestFairOrder(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	const n = 5
	key := "fair-order"
	opts := []redislock.Option{redislock.WithFair()}
	holder := newBackend(t, srv.Addr, opts...)
	lh, err := holder.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, n)
	proceed := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		b := newBackend(t, srv.Addr, opts...) // one process each
		wg.Go(func() {
			l, err := b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute, Wait: true})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				order <- -1
				return
			}
			order <- i
			<-proceed
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d: Release: %v", i, err)
			}
		})
		eventually(t, 10*time.Second, fmt.Sprintf("waiter %d queued", i), func() bool {
			return admin.ZCard(ctx, queueKey(key)).Val() == int64(i+1)
		})
	}
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The first waiter holds the key or is about to: a newcomer cannot
	// take it, although it may be free for a moment.
	newcomer := newBackend(t, srv.Addr, opts...)
	if l, err := newcomer.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrNotAcquired) {
		if err == nil {
			l.Release(ctx)
		}
		t.Errorf("newcomer's try while others queue: %v, want ErrNotAcquired", err)
	}
	for want := range n {
		if got := <-order; got != want {
			t.Errorf("grant %d went to waiter %d", want, got)
		}
		proceed <- struct{}{}
	}
	wg.Wait()
}

func TestFairDeadWaiterIsSkipped(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	const liveness = 500 * time.Millisecond
	key := "fair-dead-waiter"
	opts := []redislock.Option{redislock.WithFair(), redislock.WithWaiterLiveness(liveness)}
	holder := newBackend(t, srv.Addr, opts...)
	lh, err := holder.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	// The first waiter's process dies: its connection closes under it, so
	// it cannot leave the queue.
	deadClient := redis.NewClient(&redis.Options{Addr: srv.Addr})
	dead := mustNew(t, deadClient, opts...)
	deadErr := make(chan error, 1)
	go func() {
		_, err := dead.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute, Wait: true})
		deadErr <- err
	}()
	eventually(t, 10*time.Second, "dead waiter queued", func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == 1 })
	deadID := admin.ZRange(ctx, queueKey(key), 0, 0).Val()[0]
	deadClient.Close()
	if err := <-deadErr; err == nil {
		t.Fatal("the dead waiter's Acquire succeeded")
	}
	dead.Close()
	if _, err := admin.ZScore(ctx, queueKey(key), deadID).Result(); err != nil {
		t.Fatalf("the dead waiter left the queue (%v): the fault did not bite", err)
	}

	live := newBackend(t, srv.Addr, opts...)
	got := make(chan error, 1)
	go func() {
		l, err := live.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "live waiter queued behind the dead one", func() bool {
		q := admin.ZRange(ctx, queueKey(key), 0, -1).Val()
		return len(q) == 2 && q[0] == deadID
	})
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("live waiter: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("live waiter not served 30s after the release; the dead waiter's liveness is %v", liveness)
	}
	if _, err := admin.ZScore(ctx, queueKey(key), deadID).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("dead waiter still queued: %v", err)
	}
}

// Every key a lock uses hashes to one slot, whatever braces the user key
// contains: checked on a real one-node Redis Cluster, which refuses
// cross-slot scripts, and with CLUSTER KEYSLOT.
func TestKeysShareOneSlot(t *testing.T) {
	srv := testserver.StartRedisCluster(t, 1).Nodes[0]
	ctx := testCtx(t)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { cc.Close() })
	opts := []redislock.Option{redislock.WithFair()}
	holderB, waiterB := mustNew(t, cc, opts...), mustNew(t, cc, opts...)
	t.Cleanup(func() { holderB.Close(); waiterB.Close() })
	f := redislock.NewFence(cc)

	for _, key := range []string{"a{b}c", "{", "}", "{}", "}{", "{a}", "a}b{c", "%7D", "plain"} {
		lh, err := holderB.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatalf("Acquire(%q): %v", key, err)
		}
		done := make(chan error, 1)
		go func() {
			l, err := waiterB.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute, Wait: true})
			if err == nil {
				err = l.Release(ctx)
			}
			done <- err
		}()
		eventually(t, 10*time.Second, "waiter queued", func() bool { return cc.ZCard(ctx, queueKey(key)).Val() == 1 })
		data := "data:" + redislock.HashTag(key)
		if err := f.Set(ctx, key, lh.Token(), data, "v", 0); err != nil {
			t.Fatalf("Fence.Set(%q): %v", key, err)
		}
		keys := scanKeys(t, cc, "*")
		if err := lh.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("waiter on %q: %v", key, err)
		}
		keys = append(keys, scanKeys(t, cc, "*")...)

		tag := redislock.HashTag(key)
		kinds := map[string]bool{}
		slots := map[int64][]string{}
		for _, k := range keys {
			if !strings.Contains(k, tag) {
				continue
			}
			for _, kind := range []string{":lock", ":token", ":queue", ":alive", ":released:", ":fence"} {
				if strings.Contains(k, tag+kind) {
					kinds[kind] = true
				}
			}
			if k == data {
				kinds["data"] = true
			}
			slot, err := cc.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots[slot] = append(slots[slot], k)
		}
		if len(kinds) != 7 {
			t.Errorf("key %q: saw key kinds %v, want all 7 (lock, token, queue, alive, tombstone, fence, data)", key, kinds)
		}
		if len(slots) != 1 {
			t.Errorf("key %q: its keys span slots %v", key, slots)
		}
		cc.FlushAll(ctx)
	}
}

func scanKeys(t *testing.T, cc *redis.ClusterClient, pattern string) []string {
	t.Helper()
	var keys []string
	var mu sync.Mutex
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, pattern).Result()
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// Tokens survive a crash (kill -9) only with appendonly yes and appendfsync
// always; without persistence they regress.
func TestTokensAcrossServerCrash(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []testserver.RedisOption
		durable bool
	}{
		{"NoPersistence", nil, false},
		{"AppendFsyncAlways", []testserver.RedisOption{testserver.WithRedisAppendOnly()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRedis(t, tc.opts...)
			ctx := testCtx(t)
			b := newBackend(t, srv.Addr)
			key := "crash"
			var before uint64
			for range 3 {
				l, err := b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				before = l.Token()
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			srv.Kill()
			srv.Restart(t)
			var after uint64
			eventually(t, 30*time.Second, "acquire after restart", func() bool {
				l, err := b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
				if err != nil {
					return false
				}
				after = l.Token()
				return l.Release(ctx) == nil
			})
			if tc.durable && after <= before {
				t.Errorf("token %d after the crash, not above %d before it", after, before)
			}
			if !tc.durable && after > before {
				t.Errorf("token %d after a crash without persistence is above %d: expected the counter to be lost", after, before)
			}
			t.Logf("token before the crash %d, after %d", before, after)
		})
	}
}

// WithWaitReplicas: a grant is confirmed by a replica, or released and
// reported unavailable.
func TestWaitReplicas(t *testing.T) {
	primary := startRedis(t)
	replica := startRedis(t, testserver.WithRedisReplicaOf(primary))
	ctx := testCtx(t)
	rc := newClient(t, replica.Addr)
	admin := newClient(t, primary.Addr)

	ok := newBackend(t, primary.Addr, redislock.WithWaitReplicas(1, 10*time.Second))
	l, err := ok.Acquire(ctx, "replicated", distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire with 1 replica: %v", err)
	}
	if v := rc.Get(ctx, lockKey("replicated")).Val(); !strings.Contains(v, fmt.Sprintf("|%d|", l.Token())) {
		t.Errorf("the replica has %q for the lock, want the grant of token %d", v, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	tooMany := newBackend(t, primary.Addr, redislock.WithWaitReplicas(2, 200*time.Millisecond))
	if l, err := tooMany.Acquire(ctx, "unreplicated", distlock.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrUnavailable) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("Acquire waiting for 2 replicas with 1: %v, want ErrUnavailable", err)
	}
	if n := admin.Exists(ctx, lockKey("unreplicated")).Val(); n != 0 {
		t.Errorf("a failed replicated acquire left its lock behind")
	}
	if l, err := newBackend(t, primary.Addr).Acquire(ctx, "unreplicated", distlock.AcquireOptions{TTL: time.Minute}); err != nil {
		t.Errorf("the key is not free after a failed replicated acquire: %v", err)
	} else {
		l.Release(ctx)
	}

}

// New refuses a bad configuration at once, with an error that says what is
// wrong, rather than a Backend that fails every call.
func TestBadConfiguration(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": closedAddr(t)}})
	t.Cleanup(func() { ring.Close() })
	// A client of another type (a wrapper, say) has no single node to WAIT on.
	var other redis.UniversalClient = struct{ redis.UniversalClient }{newClient(t, closedAddr(t))}
	c := newClient(t, closedAddr(t))
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opt    redislock.Option
		want   string
	}{
		{"nil client", nil, nil, "distlock: invalid option: redislock: nil redis client"},
		{"brace prefix", c, redislock.WithPrefix("a{b}:"), `distlock: invalid option: redislock: prefix "a{b}:" contains a brace`},
		{"short liveness", c, redislock.WithWaiterLiveness(time.Millisecond), "distlock: invalid option: redislock: waiter liveness 1ms is shorter than 30ms"},
		{"ring", ring, nil, "distlock: invalid option: redislock: *redis.Ring is not supported (its shards do not share pub/sub); use one Backend per shard"},
		{"negative replicas", c, redislock.WithWaitReplicas(-1, time.Second), "distlock: invalid option: redislock: negative replica count -1"},
		{"zero replica timeout", c, redislock.WithWaitReplicas(1, 0), "distlock: invalid option: redislock: replica wait timeout 0s is not positive"},
		{"replicas without a node client", other, redislock.WithWaitReplicas(1, time.Second), "distlock: invalid option: redislock: WithWaitReplicas needs a *redis.Client or *redis.ClusterClient, not struct { redis.UniversalClient }"},
	} {
		b, err := redislock.New(tc.client, tc.opt)
		if b != nil || !errors.Is(err, distlock.ErrInvalidOption) || err.Error() != tc.want {
			t.Errorf("%s: New = %v, %v; want nil, %q", tc.name, b, err, tc.want)
		}
	}
}

// A closed Backend refuses Acquire, and wakes a waiting Acquire, with an
// error matching distlock.ErrClosed as every backend's does; its leases
// still release.
func TestClosedBackend(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "closed-backend"
	lh, err := newBackend(t, srv.Addr).Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, srv.Addr)
	own, err := b.Acquire(ctx, key+"/own", distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute, Wait: true})
		waiting <- err
	}()
	eventually(t, 10*time.Second, "the waiter subscribed", func() bool {
		return admin.PubSubNumSub(ctx, channelOf(key)).Val()[channelOf(key)] == 1
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; !errors.Is(err, distlock.ErrClosed) || !errors.Is(err, redislock.ErrClosed) {
		t.Errorf("waiting Acquire at Close: %v, want a match for distlock.ErrClosed and redislock.ErrClosed", err)
	}
	for _, wait := range []bool{false, true} {
		if _, err := b.Acquire(ctx, key+"/after", distlock.AcquireOptions{TTL: time.Minute, Wait: wait}); !errors.Is(err, distlock.ErrClosed) {
			t.Errorf("Acquire (wait %v) after Close: %v, want a match for distlock.ErrClosed", wait, err)
		}
	}
	if err := own.Release(ctx); err != nil {
		t.Errorf("Release of a lease after its Backend closed: %v", err)
	}
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
