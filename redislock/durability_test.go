package redislock_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/testserver"
)

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
				l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
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
				l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
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
	l, err := ok.Acquire(ctx, "replicated", driver.AcquireOptions{TTL: time.Minute})
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
	if l, err := tooMany.Acquire(ctx, "unreplicated", driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrUnavailable) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("Acquire waiting for 2 replicas with 1: %v, want ErrUnavailable", err)
	}
	if n := admin.Exists(ctx, lockKey("unreplicated")).Val(); n != 0 {
		t.Errorf("a failed replicated acquire left its lock behind")
	}
	if l, err := newBackend(t, primary.Addr).Acquire(ctx, "unreplicated", driver.AcquireOptions{TTL: time.Minute}); err != nil {
		t.Errorf("the key is not free after a failed replicated acquire: %v", err)
	} else {
		l.Release(ctx)
	}

}

// WithWaitReplicas holds for a grant that a release hands to a waiting
// Acquire as for one the waiter takes itself: the waiter confirms it with
// WAIT before returning it. With no replica to confirm it, the Acquire
// fails and leaves the key free.
func TestWaitReplicasHandOff(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "handed-unreplicated"
	holder := newBackend(t, srv.Addr)
	waiter := newBackend(t, srv.Addr, redislock.WithWaitReplicas(1, 100*time.Millisecond),
		redislock.WithWaiterLiveness(time.Hour)) // no try of its own while it waits
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   driver.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		got <- result{l, err}
	}()
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == 1 })
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if !errors.Is(r.err, distlock.ErrUnavailable) {
		if r.err == nil {
			r.l.Release(ctx)
		}
		t.Fatalf("a handed grant that no replica confirmed: %v, want ErrUnavailable", r.err)
	}
	if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
		t.Errorf("the unconfirmed handed grant was left behind")
	}
}
