package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/testserver"
)

// sentinelSet is a primary, one replica and a Sentinel watching them as
// "main".
type sentinelSet struct {
	primary, replica, sentinel *testserver.Redis
}

func startSentinelSet(t *testing.T) *sentinelSet {
	t.Helper()
	primary := startRedis(t, testserver.WithRedisAppendOnly())
	replica := startRedis(t, testserver.WithRedisReplicaOf(primary), testserver.WithRedisAppendOnly())
	return &sentinelSet{primary, replica, testserver.StartRedisSentinel(t, primary, "main", replica)}
}

func (s *sentinelSet) url() string { return "redis+sentinel://" + s.sentinel.Addr + "/main" }

func (s *sentinelSet) failoverClient(t testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "main", SentinelAddrs: []string{s.sentinel.Addr}})
	t.Cleanup(func() { c.Close() })
	return c
}

// The suite through a Sentinel-discovered primary, with the Backend opened
// from the CLI's URL form.
func TestConformanceSentinel(t *testing.T) {
	s := startSentinelSet(t)
	// The admin client resolves the primary now: the Sentinel subscription
	// go-redis then starts would otherwise start inside the first subtest
	// that revokes, and fail its leak check.
	admin := s.failoverClient(t)
	if err := admin.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	distlocktest.Run(t,
		func(t *testing.T) driver.Backend {
			b, err := redislock.OpenURL(context.Background(), s.url())
			if err != nil {
				t.Fatal(err)
			}
			return closedWithTest(t, b)
		},
		suiteOptions(admin)...,
	)
}

// A Sentinel failover while a lock is held. A grant confirmed by the
// replica (WithWaitReplicas) survives the promotion: a second client,
// following the Sentinel to the new primary, is refused the key; the holder
// releases it there, and the next grant's token is above the first.
func TestSentinelFailoverKeepsReplicatedGrant(t *testing.T) {
	s := startSentinelSet(t)
	ctx := testCtx(t)
	holder := mustNew(t, s.failoverClient(t), redislock.WithWaitReplicas(1, 5*time.Second))
	t.Cleanup(func() { holder.Close() })
	other, err := redislock.OpenURL(ctx, s.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })

	held, err := holder.Acquire(ctx, "failover", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.sentinel.Do("SENTINEL", "FAILOVER", "main"); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	eventually(t, 30*time.Second, "the replica promoted", func() bool {
		v, err := s.sentinel.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "main")
		a, _ := v.([]any)
		return err == nil && len(a) == 2 && a[1] == strconv.Itoa(s.replica.Port)
	})
	eventually(t, 30*time.Second, "the new primary accepts writes", func() bool {
		v, err := s.replica.Do("INFO", "replication")
		info, _ := v.(string)
		return err == nil && strings.Contains(info, "role:master")
	})

	// The second client reaches the new primary (its first tries may meet
	// the old one, now read-only, or a closed connection) and finds the
	// key held.
	var tryErr error
	eventually(t, 30*time.Second, "a try on the new primary", func() bool {
		var l driver.Lease
		l, tryErr = other.Acquire(ctx, "failover", driver.AcquireOptions{TTL: time.Minute})
		if tryErr == nil {
			l.Release(ctx)
			t.Fatalf("granted a key whose replicated grant (token %d) survived the failover, token %d", held.Token(), l.Token())
		}
		return errors.Is(tryErr, distlock.ErrNotAcquired)
	})

	// The holder's refresh and release reach the new primary too.
	eventually(t, 30*time.Second, "the holder's refresh on the new primary", func() bool {
		_, err := held.Refresh(ctx, time.Minute)
		if errors.Is(err, distlock.ErrLockLost) {
			t.Fatalf("the holder lost its replicated grant in the failover: %v", err)
		}
		return err == nil
	})
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release after failover: %v", err)
	}
	next, err := other.Acquire(ctx, "failover", driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Release(ctx)
	if next.Token() <= held.Token() {
		t.Errorf("token after failover %d, want above %d", next.Token(), held.Token())
	}
}
