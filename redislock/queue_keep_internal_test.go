package redislock

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/testserver"
)

// A waiting try keeps both queue keys alive past its own liveness
// deadline, never shortens their life (another waiter in line may have a
// longer liveness), and never leaves either without expiry: whether it is
// an exclusive or a shared waiter, and after a sweep that emptied the
// queue within the same try (the queue made again by the try's ZADD).
func TestQueueKeysKeepTheirExpiry(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	b := &Backend{cfg: config{prefix: DefaultPrefix}}
	k := b.keysFor("keep", []byte("TOMB"))
	keys := []string{k.lock, k.token, k.queue, k.alive, reveal(k.tomb), k.last, k.watched, k.readers, k.grants}
	skeys := []string{k.lock, k.token, k.queue, k.alive, k.readers, k.grants, k.done}
	pttl := func(key string) time.Duration {
		d, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// join runs an exclusive waiting try of secret with liveness live.
	join := func(secret string, live time.Duration) {
		t.Helper()
		ms := live.Milliseconds()
		id := "B:" + secret + "|" + secret + "|60000|" + strconv.FormatInt(ms, 10) + "|o"
		if err := acquireScript().Run(ctx, c, keys, secret+"|", "60000", "|1|0|o", "qj", id, strconv.FormatInt(ms, 10)).Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
	}
	held := func() {
		t.Helper()
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Set(ctx, k.lock, "HOLDER|1|0|0|o", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		c.Set(ctx, k.token, "1", 0)
	}

	t.Run("a shorter liveness does not shorten them", func(t *testing.T) {
		held()
		join("LONG", time.Minute)
		join("SHORT", time.Second)
		if d := pttl(k.queue); d < time.Minute {
			t.Fatalf("queue key expires in %v, before the first waiter's liveness deadline (1m)", d)
		}
	})
	t.Run("nor a shared waiter's", func(t *testing.T) {
		held()
		join("LONG", time.Minute)
		id := "B:sSHARED|SHARED|60000|1000|o"
		if err := sharedAcquire().Run(ctx, c, skeys, "SHARED|", "60000", "1", "o", "j", id, "1000").Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if d, a := pttl(k.queue), pttl(k.alive); d < time.Minute || a < time.Minute {
			t.Fatalf("queue keys expire in %v and %v, before the first waiter's liveness deadline (1m)", d, a)
		}
	})
	t.Run("a sweep that emptied the queue", func(t *testing.T) {
		held()
		// The queue holds a lapsed waiter only; the liveness key holds it
		// and a live entry that the queue lost (eviction, a manual
		// delete), with two minutes left.
		lapsed := "B:LAPSED|LAPSED|60000|60000|o"
		c.ZAdd(ctx, k.queue, redis.Z{Score: 1, Member: lapsed})
		c.ZAdd(ctx, k.alive, redis.Z{Score: 1, Member: lapsed}, redis.Z{Score: 4e12, Member: "B:X|X|60000|60000|o"})
		c.PExpire(ctx, k.queue, 2*time.Minute)
		c.PExpire(ctx, k.alive, 2*time.Minute)
		join("WAITER", time.Minute)
		if n, _ := c.ZCard(ctx, k.queue).Result(); n != 1 {
			t.Fatalf("%d waiters in line, want the one that joined", n)
		}
		if d := pttl(k.queue); d < time.Minute {
			t.Fatalf("queue key expires in %v (-1: never), want at least the waiter's liveness", d)
		}
	})
	t.Run("a queue made again under a longer liveness", func(t *testing.T) {
		held()
		join("LONG", 10*time.Minute)
		// The queue key is lost (eviction, a manual delete), then a waiter
		// with a short liveness makes it again, and the first refreshes.
		c.Del(ctx, k.queue)
		join("SHORT", time.Second)
		join("LONG", 10*time.Minute)
		if d := pttl(k.queue); d < 10*time.Minute {
			t.Fatalf("queue key expires in %v, before the first waiter's liveness deadline (10m)", d)
		}
	})
	t.Run("a shared waiter that makes the queue", func(t *testing.T) {
		held()
		id := "B:sSHARED|SHARED|60000|60000|o"
		if err := sharedAcquire().Run(ctx, c, skeys, "SHARED|", "60000", "1", "o", "j", id, "60000").Err(); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if d, a := pttl(k.queue), pttl(k.alive); d < time.Minute || a < time.Minute || d > 2*time.Minute || a > 2*time.Minute {
			t.Fatalf("queue keys expire in %v and %v, want twice the liveness (2m)", d, a)
		}
	})
}
