package redislock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
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
	b := mustNew(t, pc)
	t.Cleanup(func() { b.Close() })
	key := "lost-release"
	// A first round loads the scripts into the server's cache, so that the
	// faulty round's request is the release itself, not a NOSCRIPT reply.
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err = b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
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
	la, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "lease lapses", func() bool { return admin.Exists(ctx, lockKey(key)).Val() == 0 })
	other := newBackend(t, srv.Addr)
	lb, err := other.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
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

	for _, mode := range acquireModes {
		t.Run(mode.name, func(t *testing.T) {
			b := mustNew(t, pc, mode.opts...)
			t.Cleanup(func() { b.Close() })
			key := "lost-acquire/" + mode.name
			loadScripts(t, ctx, b, key)
			warm(t, pc)
			proxy.DropReplies()
			_, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: mode.wait})
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
			l, err := newBackend(t, srv.Addr, mode.opts...).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
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
	b := mustNew(t, pc)
	t.Cleanup(func() { b.Close() })
	key := "partition"
	holder := newBackend(t, srv.Addr)
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = b.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if !errors.Is(err, distlock.ErrUnavailable) || wctx.Err() != nil {
		t.Fatalf("Acquire while partitioned: %v, want ErrUnavailable before the deadline", err)
	}
	proxy.Heal()
	proxy.Reset()
	lh.Release(ctx)
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("Acquire after the partition healed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// slowThenDirect returns a client whose connections made while slow is set
// go through a fault proxy and the others straight to the server, without
// go-redis's own retries and with a 1s read timeout. A request can then be
// delayed in the proxy while the clean-up that follows it, on a new
// connection, goes straight through.
func slowThenDirect(t *testing.T, addr string) (*faultproxy.Proxy, *redis.Client, *atomic.Bool) {
	t.Helper()
	p := faultproxy.Start(t, addr)
	slow := new(atomic.Bool)
	slow.Store(true)
	c := newClient(t, addr, func(o *redis.Options) {
		o.MaxRetries = -1
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = time.Second, time.Second, time.Second
		o.Dialer = func(ctx context.Context, network, a string) (net.Conn, error) {
			if slow.Load() {
				a = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, a)
		}
	})
	return p, c, slow
}

// An acquire request that is delayed, not lost, past the client's read
// timeout reaches the server after the clean-up that was meant to undo it.
// The naive clean-up finds nothing, and the late SET NX then grants the key
// to nobody for a whole TTL. The Backend's clean-up leaves the attempt's
// tombstone, and the late acquire does nothing. The proxy holds the
// request until the clean-up is done (a delay of the network timed the
// two, and a clean-up that came late let the request in first).
func TestDelayedAcquireDoesNotOvertakeCleanup(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	m := startMonitor(t, srv.Addr)

	t.Run("Baseline", func(t *testing.T) {
		proxy, pc, slow := slowThenDirect(t, srv.Addr)
		warm(t, pc)
		slow.Store(false)
		proxy.Blackhole()
		key := "naive-delayed"
		if err := pc.SetNX(ctx, key, "me", time.Minute).Err(); err == nil {
			t.Fatal("SET NX was not delayed past the read timeout: the fault did not bite")
		}
		if n, err := compareDel.Run(ctx, pc, []string{key}, "me").Int(); err != nil || n != 0 {
			t.Fatalf("clean-up: %d, %v; want 0 (nothing there yet)", n, err)
		}
		proxy.Heal() // the SET NX held in the network arrives
		m.waitFor(t, `"set"`, `"`+key+`"`)
		if d := admin.PTTL(ctx, key).Val(); d <= 0 {
			t.Fatalf("the late SET NX left nothing (PTTL %v): the fault did not bite", d)
		}
		t.Logf("baseline bites: the late SET NX holds the key for %v after its clean-up", admin.PTTL(ctx, key).Val())
	})

	for _, mode := range acquireModes {
		t.Run(mode.name, func(t *testing.T) {
			proxy, pc, slow := slowThenDirect(t, srv.Addr)
			b := mustNew(t, pc, mode.opts...)
			t.Cleanup(func() { b.Close() })
			key := "delayed-acquire/" + mode.name
			loadScripts(t, ctx, b, key)
			warm(t, pc)
			slow.Store(false)
			proxy.Blackhole() // the acquire's bytes wait in the network
			_, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: mode.wait})
			if !errors.Is(err, distlock.ErrUnavailable) {
				t.Fatalf("Acquire: %v, want ErrUnavailable", err)
			}
			// Acquire returns once its clean-up is done (or handed to
			// the background when it failed, as it does not here).
			proxy.Heal()
			tokenKey := redislock.DefaultPrefix + redislock.HashTag(key) + ":token"
			// The late acquire reached the server (the clean-up's
			// release names the token's key too).
			m.waitFor(t, `"evalsha"`, `"`+redislock.AcquireHash()+`"`, `"`+tokenKey+`"`)
			if pttl := admin.PTTL(ctx, lockKey(key)).Val(); pttl > 0 {
				t.Errorf("Acquire failed, yet its grant exists at the server for another %v", pttl)
			}
			if v := admin.Get(ctx, tokenKey).Val(); v != "" {
				t.Errorf("the late acquire drew token %s", v)
			}
			if n := admin.Exists(ctx, queueKey(key)).Val(); n != 0 {
				t.Error("the late acquire queued")
			}
			l, err := newBackend(t, srv.Addr, mode.opts...).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatalf("the key is not free after the late acquire: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// writeFault fails, once armed, the first write to a connection that
// contains all of its parts: it closes the connection and reports an
// error, as a connection reset under the writer does. Parts are matched
// as whole RESP bulk strings.
type writeFault struct {
	mu    sync.Mutex
	parts [][]byte
	hit   chan struct{} // closed when the fault fired
}

func (f *writeFault) arm(parts ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.parts = nil
	for _, p := range parts {
		f.parts = append(f.parts, []byte("\r\n"+p+"\r\n"))
	}
	f.hit = make(chan struct{})
}

// fires reports whether p is the write to fail, disarming the fault.
func (f *writeFault) fires(p []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parts == nil {
		return false
	}
	for _, part := range f.parts {
		if !bytes.Contains(p, part) {
			return false
		}
	}
	f.parts = nil
	close(f.hit)
	return true
}

type faultyConn struct {
	net.Conn
	f *writeFault
}

func (c faultyConn) Write(p []byte) (int, error) {
	if c.f.fires(p) {
		c.Conn.Close()
		return 0, errors.New("injected write failure")
	}
	return c.Conn.Write(p)
}

// faultyClient returns a client of addr whose connections fail the writes
// that f is armed for; mod changes its options further.
func faultyClient(t *testing.T, addr string, f *writeFault, mod ...func(*redis.Options)) *redis.Client {
	return newClient(t, addr, append([]func(*redis.Options){func(o *redis.Options) {
		o.Dialer = func(ctx context.Context, network, a string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, a)
			if err != nil {
				return nil, err
			}
			return faultyConn{Conn: c, f: f}, nil
		}
	}}, mod...)...)
}

// A failed release says each thing once: the backend gives the cause and
// the distlock sentinel, and leaves the operation and the key to the
// Client's distlock.KeyError.
func TestReleaseErrorText(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	f := &writeFault{}
	b := mustNew(t, faultyClient(t, srv.Addr, f, func(o *redis.Options) { o.MaxRetries = -1 }))
	t.Cleanup(func() { b.Close() })
	key := "release-error-text"

	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f.arm("evalsha") // the release's request
	err = l.Release(ctx)
	if want := "distlock: service unavailable: redislock: injected write failure"; err == nil || err.Error() != want {
		t.Errorf("Release with a failed write: %v, want %q", err, want)
	}
	if !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Release with a failed write: %v, want a match for ErrUnavailable", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("retried Release: %v", err)
	}

	l, err = b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	admin.Del(ctx, lockKey(key)) // the service drops the grant
	err = l.Release(ctx)
	want := fmt.Sprintf("distlock: lock lost: redislock: the grant of token %d is gone (it expired or was taken over)", l.Token())
	if err == nil || err.Error() != want || !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release of a dropped grant: %v, want %q", err, want)
	}
}

// When the write of a SUBSCRIBE fails, go-redis reconnects at once and
// resubscribes the channels it knew of, without the new one, which it adds
// only afterwards: the channel has no subscription, and its waiters hear no
// release. The Backend subscribes again.
func TestSubscribeWriteFailure(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	numsub := func(ch string) int64 { return admin.PubSubNumSub(ctx, ch).Val()[ch] }

	t.Run("Baseline", func(t *testing.T) {
		f := &writeFault{}
		ps := faultyClient(t, srv.Addr, f).Subscribe(ctx, "other")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil { // the confirmation of "other"
			t.Fatal(err)
		}
		f.arm("subscribe", "new-channel")
		if err := ps.Subscribe(ctx, "new-channel"); err == nil {
			t.Fatal("SUBSCRIBE did not fail: the fault did not bite")
		}
		// go-redis has reconnected and resubscribed "other"; once the server
		// counts it on one connection only, that connection is the new one
		// and all it was sent has been processed.
		eventually(t, 10*time.Second, "the new connection subscribed to other", func() bool {
			return numsub("other") == 1 && pubsubClients(t, admin) == 1
		})
		if n := numsub("new-channel"); n != 0 {
			t.Fatalf("new-channel has %d subscribers: the fault did not bite", n)
		}
		t.Log("baseline bites: after a failed SUBSCRIBE write, go-redis's new connection lacks the channel")
	})

	t.Run("Backend", func(t *testing.T) {
		f := &writeFault{}
		b := mustNew(t, faultyClient(t, srv.Addr, f))
		t.Cleanup(func() { b.Close() })
		key := "sub-write-failure"
		holder := newBackend(t, srv.Addr)
		lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		f.arm("subscribe", redislock.WakeChannel(b))
		got := make(chan error, 1)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		go func() {
			l, err := b.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		select {
		case <-f.hit:
		case err := <-got:
			t.Fatalf("waiter returned before subscribing: %v", err)
		}
		eventually(t, 10*time.Second, "the waiter's channel subscribed", func() bool { return numsub(redislock.WakeChannel(b)) == 1 })
		if err := lh.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("waiter: %v, want a grant well before the holder's 2m TTL", err)
		}
	})
}

// acquireModes are the ways of acquiring that the fault tests go through.
var acquireModes = []struct {
	name string
	opts []redislock.Option
	wait bool
}{
	{"Try", nil, false},
	{"Wait", nil, true},
	{"UnorderedWait", []redislock.Option{redislock.WithUnordered()}, true},
}

// loadScripts acquires and releases a key next to key, so that a faulty
// request that follows is the acquire itself, not a NOSCRIPT reply.
func loadScripts(t *testing.T, ctx context.Context, b *redislock.Backend, key string) {
	t.Helper()
	l, err := b.Acquire(ctx, key+"/warm-up", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An Acquire whose request and then clean-up both fail leaves the clean-up
// to a goroutine, which retries it until the server answers again; Close
// stops it (the orphan grant then lapses by its TTL).
func TestCleanupRetriedInBackground(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	for _, heal := range []bool{true, false} {
		name := "Closed"
		if heal {
			name = "Healed"
		}
		t.Run(name, func(t *testing.T) {
			proxy, pc := proxied(t, srv.Addr)
			b := mustNew(t, pc)
			t.Cleanup(func() { b.Close() })
			key := "background-cleanup/" + name
			loadScripts(t, ctx, b, key)
			// The acquire's reply is lost, then the clean-up's request.
			redislock.SetAbandonHook(b, proxy.Blackhole)
			warm(t, pc)
			proxy.DropReplies()
			if _, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrUnavailable) {
				t.Fatalf("Acquire with its reply lost: %v, want ErrUnavailable", err)
			}
			if admin.Exists(ctx, lockKey(key)).Val() != 1 {
				t.Fatal("no orphan grant after the Acquire: the fault did not bite")
			}
			if heal {
				proxy.Heal()
				eventually(t, 30*time.Second, "orphan grant removed by the background clean-up", func() bool {
					return admin.Exists(ctx, lockKey(key)).Val() == 0
				})
				return
			}
			closed := make(chan error, 1)
			go func() { closed <- b.Close() }()
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Close did not stop the clean-up being retried")
			}
			if admin.Exists(ctx, lockKey(key)).Val() != 1 {
				t.Error("the orphan grant is gone although the server was cut off until Close")
			}
			proxy.Heal()
		})
	}
}
