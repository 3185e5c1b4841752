package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/redislock"
)

// proxied returns a client that reaches srv through a fault proxy, without
// go-redis's own retries, so that each call is one request.
func proxied(t *testing.T, addr string) (*faultproxy.Proxy, *redis.Client) {
	t.Helper()
	p := faultproxy.Start(t, addr)
	return p, newClient(t, p.Addr(), func(o *redis.Options) {
		o.MaxRetries = -1
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, time.Second, time.Second
	})
}

// warm makes sure c has an open connection, so that the next request is
// sent at once (a new connection's handshake would meet the fault first).
func warm(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// compareDel is the guide's compare-and-delete release, without a tombstone.
var compareDel = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// A release whose reply is lost took effect; retried, the naive script says
// "not held", while a Lease's retry reports the release as done. A lease
// whose grant had really gone still gets ErrLockLost.
func TestLostReleaseReply(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	proxy, pc := proxied(t, srv.Addr)

	// Baseline: the retry cannot tell its own earlier release from a loss.
	admin.Set(ctx, "naive", "me", time.Minute)
	warm(t, pc)
	proxy.DropReplies()
	if err := compareDel.Eval(ctx, pc, []string{"naive"}, "me").Err(); err == nil {
		t.Fatal("baseline: the reply was not lost: the fault did not bite")
	}
	proxy.Heal()
	if n, err := compareDel.Eval(ctx, pc, []string{"naive"}, "me").Int(); err != nil || n != 0 {
		t.Fatalf("baseline retry: %d, %v", n, err)
	}
	t.Log("baseline bites: the retried compare-and-delete reports 0 (not held) after its own lost release")

	// Guard.
	b := redislock.New(pc)
	t.Cleanup(func() { b.Close() })
	key := "lost-release"
	// A first round loads the scripts into the server's cache, so that the
	// faulty round's request is the release itself, not a NOSCRIPT reply.
	l, err := b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err = b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	warm(t, pc)
	proxy.DropReplies()
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Release with its reply lost: %v, want ErrUnavailable", err)
	}
	proxy.Heal()
	if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
		t.Fatal("the release with a lost reply did not take effect")
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("retried Release after a lost reply: %v, want success", err)
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release after a confirmed release: %v, want ErrLockLost", err)
	}

	// A grant that really lapsed: the retry says lost, and the next
	// holder's lock is untouched.
	la, err := b.Acquire(ctx, key, distlock.AcquireOptions{TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "lease lapses", func() bool { return admin.Exists(ctx, lockKey(key)).Val() == 0 })
	other := newBackend(t, srv.Addr)
	lb, err := other.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	warm(t, pc)
	proxy.DropReplies()
	if err := la.Release(ctx); !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Release with its reply lost: %v, want ErrUnavailable", err)
	}
	proxy.Heal()
	if err := la.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("retried Release of a lapsed grant: %v, want ErrLockLost", err)
	}
	if _, err := lb.Refresh(ctx, time.Minute); err != nil {
		t.Errorf("next holder's lock was touched: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An acquire whose reply is lost must not leave a lock behind. The naive
// SET NX PX does; Acquire cleans up with its owner value.
func TestLostAcquireReply(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	proxy, pc := proxied(t, srv.Addr)

	warm(t, pc)
	proxy.DropReplies()
	if err := pc.SetNX(ctx, "naive", "me", time.Minute).Err(); err == nil {
		t.Fatal("baseline: the reply was not lost: the fault did not bite")
	}
	proxy.Heal()
	if admin.Exists(ctx, "naive").Val() != 1 {
		t.Fatal("baseline: SET NX with a lost reply left nothing behind")
	}
	t.Log("baseline bites: SET NX whose reply was lost leaves an orphan lock for its whole TTL")

	for _, mode := range []struct {
		name string
		opts []redislock.Option
		wait bool
	}{
		{"Try", nil, false},
		{"Wait", nil, true},
		{"FairWait", []redislock.Option{redislock.WithFair()}, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			b := redislock.New(pc, mode.opts...)
			t.Cleanup(func() { b.Close() })
			key := "lost-acquire/" + mode.name
			// Load the scripts first: the faulty request must be the
			// acquire itself, not a NOSCRIPT reply.
			l, err := b.Acquire(ctx, key+"/warm-up", distlock.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			warm(t, pc)
			proxy.DropReplies()
			_, err = b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute, Wait: mode.wait})
			proxy.Heal()
			if !errors.Is(err, distlock.ErrUnavailable) {
				t.Fatalf("Acquire with its reply lost: %v, want ErrUnavailable", err)
			}
			tokenKey := redislock.DefaultPrefix + redislock.HashTag(key) + ":token"
			if v := admin.Get(ctx, tokenKey).Val(); v != "1" {
				t.Fatalf("token counter %q: the lost acquire did not take effect at the server; the fault did not bite", v)
			}
			// The clean-up ran at the server even if its own reply was lost;
			// a clean-up that did not is retried in the background.
			eventually(t, 30*time.Second, "orphan grant removed", func() bool {
				return admin.Exists(ctx, lockKey(key), queueKey(key)).Val() == 0
			})
			l, err = newBackend(t, srv.Addr, mode.opts...).Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatalf("the key is not free after a lost acquire: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A client cut off while waiting fails in bounded time and holds nothing;
// after the partition heals, the same Backend works again.
func TestPartitionWhileWaiting(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	proxy, pc := proxied(t, srv.Addr)
	b := redislock.New(pc)
	t.Cleanup(func() { b.Close() })
	key := "partition"
	holder := newBackend(t, srv.Addr)
	lh, err := holder.Acquire(ctx, key, distlock.AcquireOptions{TTL: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = b.Acquire(wctx, key, distlock.AcquireOptions{TTL: time.Minute, Wait: true})
	if !errors.Is(err, distlock.ErrUnavailable) || wctx.Err() != nil {
		t.Fatalf("Acquire while partitioned: %v, want ErrUnavailable before the deadline", err)
	}
	proxy.Heal()
	proxy.Reset()
	lh.Release(ctx)
	l, err := b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("Acquire after the partition healed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
