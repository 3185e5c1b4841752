package redislock_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/redislock"
)

// go-redis sends a request again, on a new connection, when the reply to
// the first copy timed out; the first copy may still be on its way. Here
// it is delayed in the network past the grant that the second copy got and
// past that grant's release. Arriving then, it must not take the key
// again for a secret that nobody holds any more (which would keep every
// other client out for a whole TTL).
func TestLateCopyAfterReleaseTakesNothing(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	m := startMonitor(t, srv.Addr)
	for _, mode := range acquireModes {
		t.Run(mode.name, func(t *testing.T) {
			p := faultproxy.Start(t, srv.Addr)
			var slow atomic.Bool // connections opened meanwhile go through p
			slow.Store(true)
			c := newClient(t, srv.Addr, func(o *redis.Options) {
				o.ReadTimeout = 500 * time.Millisecond // and go-redis's retries, by default
				o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
					if slow.Load() {
						addr = p.Addr()
					}
					var d net.Dialer
					return d.DialContext(ctx, network, addr)
				}
			})
			b := mustNew(t, c, mode.opts...)
			t.Cleanup(func() { b.Close() })
			key := "late-copy/" + mode.name
			loadScripts(t, ctx, b, key)
			warm(t, c)
			slow.Store(false)
			p.Delay(2 * time.Second) // the first copy waits 2s in the network
			l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: mode.wait})
			if err != nil {
				t.Fatalf("Acquire through go-redis's retry: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			tokenKey := redislock.DefaultPrefix + redislock.HashTag(key) + ":token"
			acquire := `"` + lockKey(key) + `" "` + tokenKey + `"` // acquire.lua's first keys
			m.waitFor(t, `"evalsha"`, acquire)                     // the second copy, granted
			m.waitFor(t, `"evalsha"`, acquire)                     // the first, late
			if pttl := admin.PTTL(ctx, lockKey(key)).Val(); pttl > 0 {
				t.Errorf("the late copy of a released grant's request holds the key for another %v", pttl)
			}
			l, err = newBackend(t, srv.Addr, mode.opts...).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatalf("the key is not free after the late copy: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
