package redislock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/redislock"
)

// An uncontended acquire and release is two requests, waiting or not, in
// either mode: the waiting Acquire subscribes only when its first try finds
// the key held.
func TestUncontendedRequests(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	m := startMonitor(t, srv.Addr)
	for _, mode := range []struct {
		name string
		opts []redislock.Option
		wait bool
	}{
		{"Try", nil, false},
		{"Wait", nil, true},
		{"UnorderedTry", []redislock.Option{redislock.WithUnordered()}, false},
		{"UnorderedWait", []redislock.Option{redislock.WithUnordered()}, true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			b := newBackend(t, srv.Addr, mode.opts...)
			key := "uncontended/" + mode.name
			cycle := func(key string) {
				t.Helper()
				l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: mode.wait})
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// The first cycle dials, loads the scripts and checks the
			// eviction policy.
			cycle(key + "/warm-up")
			m.requests(t, admin)
			cycle(key)
			if got := m.requests(t, admin); !slices.Equal(got, []string{"evalsha", "evalsha"}) {
				t.Errorf("requests of an uncontended acquire and release: %v, want [evalsha evalsha]", got)
			}
			if n := pubsubClients(t, admin); n != 0 {
				t.Errorf("%d pub/sub connections after uncontended acquires", n)
			}
		})
	}
}

// A release that lands after a waiter's first try and before its
// subscription is published to nobody. Without the try that follows the
// subscription, the waiter sleeps on its fallback timer (the holder's TTL,
// or with the queue the refresh period of its place, here made as long)
// although the key is free; with it, the waiter is served at once.
func TestReleaseBeforeSubscription(t *testing.T) {
	for _, mode := range []struct {
		name string
		opt  redislock.Option
	}{{"Queue", redislock.WithWaiterLiveness(time.Hour)}, {"Unordered", redislock.WithUnordered()}} {
		t.Run(mode.name, func(t *testing.T) { testReleaseBeforeSubscription(t, mode.opt) })
	}
}

func testReleaseBeforeSubscription(t *testing.T, opt redislock.Option) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	const ttl = 2 * time.Minute
	key := "release-before-subscription"
	holder := newBackend(t, srv.Addr, opt)

	run := func(t *testing.T, recheck bool) (slept bool, res chan error, cancel context.CancelFunc) {
		lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		b := newBackend(t, srv.Addr, opt)
		if !recheck {
			redislock.SetNoRecheck(b)
		}
		sleeping := make(chan struct{}, 1)
		redislock.SetWaitHooks(b,
			func() { // the first try found the key held: release it now
				if err := lh.Release(ctx); err != nil {
					t.Errorf("holder's Release: %v", err)
				}
			},
			func() {
				select {
				case sleeping <- struct{}{}:
				default:
				}
			})
		wctx, cancel := context.WithTimeout(ctx, ttl/4)
		res = make(chan error, 1)
		go func() {
			l, err := b.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			if err == nil {
				err = l.Release(ctx)
			}
			res <- err
		}()
		select {
		case <-sleeping:
			return true, res, cancel
		case err := <-res:
			res <- err
			return false, res, cancel
		}
	}

	t.Run("WithoutRecheck", func(t *testing.T) {
		slept, res, cancel := run(t, false)
		defer cancel()
		if !slept {
			t.Fatalf("the waiter returned without sleeping: %v", <-res)
		}
		// The waiter sleeps until the holder's TTL although the key is free:
		// the release was published before it subscribed.
		if n := admin.Exists(ctx, lockKey(key)).Val(); n != 0 {
			t.Fatal("the key is still held: the release did not happen first")
		}
		select {
		case err := <-res:
			t.Fatalf("the waiter was served (%v): the fault did not bite", err)
		case <-time.After(time.Second):
		}
		t.Log("fault bites: a waiter without the recheck sleeps on a free key until its fallback timer")
		cancel()
		if err := <-res; !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("cancelled waiter: %v", err)
		}
	})
	t.Run("WithRecheck", func(t *testing.T) {
		slept, res, cancel := run(t, true)
		defer cancel()
		if slept {
			t.Error("the waiter went to sleep on a free key")
		}
		if err := <-res; err != nil {
			t.Fatalf("waiter: %v, want a grant right after its subscription", err)
		}
	})
}

// A chain of hand-offs on one key (each waiter arrives while the previous
// one holds the key) subscribes once: the channel lingers between waiters.
func TestHandOffChainSubscribesOnce(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "handoff-chain"
	holder := newBackend(t, srv.Addr)
	b := newBackend(t, srv.Addr)
	// A long linger keeps the test independent of the machine's speed.
	redislock.SetLinger(b, time.Hour)
	sleeping := make(chan struct{}, 1)
	redislock.SetWaitHooks(b, nil, func() {
		select {
		case sleeping <- struct{}{}:
		default:
		}
	})
	m := startMonitor(t, srv.Addr)

	var prev driver.Lease
	prev, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m.requests(t, admin)
	const chain = 5
	for i := range chain {
		got := make(chan driver.Lease, 1)
		go func() {
			l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			got <- l
		}()
		<-sleeping // waiting for the key, which prev holds
		if err := prev.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if prev = <-got; prev == nil {
			t.FailNow()
		}
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range m.requests(t, admin) {
		count[r]++
	}
	if count["subscribe"] != 1 || count["unsubscribe"] != 0 {
		t.Errorf("a chain of %d hand-offs sent %d SUBSCRIBE and %d UNSUBSCRIBE, want 1 and 0 (requests: %v)",
			chain, count["subscribe"], count["unsubscribe"], count)
	}
	if ch := redislock.WakeChannel(b); admin.PubSubNumSub(ctx, ch).Val()[ch] != 1 {
		n := admin.PubSubNumSub(ctx, ch).Val()[ch]
		t.Errorf("the idle channel has %d subscribers during its linger, want 1", n)
	}
	t.Logf("requests for %d hand-offs: %v", chain, count)
}

// An Acquire whose context ends, before it starts or while it waits, fails
// with an error matching distlock.ErrNotAcquired, ctx.Err() and the
// context's cause: a Client that cancels its acquisitions with
// distlock.ErrClosed on Close gets an error that still says the context
// ended. A fair waiter leaves the queue on the way out.
func TestCanceledAcquireMatchesContext(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "canceled-acquire"
	lh, err := newBackend(t, srv.Addr).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer lh.Release(ctx)

	check := func(t *testing.T, err error) {
		t.Helper()
		for _, want := range []error{distlock.ErrNotAcquired, context.Canceled, distlock.ErrClosed} {
			if !errors.Is(err, want) {
				t.Errorf("Acquire: %v, want a match of %v", err, want)
			}
		}
		if errors.Is(err, distlock.ErrUnavailable) {
			t.Errorf("Acquire: %v matches ErrUnavailable: a Client would retry it", err)
		}
	}
	for _, mode := range []struct {
		name string
		opts []redislock.Option
	}{{"Default", nil}, {"Unordered", []redislock.Option{redislock.WithUnordered()}}} {
		t.Run(mode.name+"/Before", func(t *testing.T) {
			b := newBackend(t, srv.Addr, mode.opts...)
			ended, cancel := context.WithCancelCause(ctx)
			cancel(distlock.ErrClosed)
			for _, wait := range []bool{false, true} {
				_, err := b.Acquire(ended, key, driver.AcquireOptions{TTL: time.Minute, Wait: wait})
				check(t, err)
			}
		})
		t.Run(mode.name+"/Waiting", func(t *testing.T) {
			b := newBackend(t, srv.Addr, mode.opts...)
			sleeping := make(chan struct{}, 1)
			redislock.SetWaitHooks(b, nil, func() {
				select {
				case sleeping <- struct{}{}:
				default:
				}
			})
			wctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			res := make(chan error, 1)
			go func() {
				l, err := b.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
				if err == nil {
					l.Release(ctx)
				}
				res <- err
			}()
			select {
			case <-sleeping:
			case err := <-res:
				t.Fatalf("the waiter returned without waiting: %v", err)
			}
			cancel(distlock.ErrClosed)
			check(t, <-res)
			if n := admin.ZCard(ctx, queueKey(key)).Val(); n != 0 {
				t.Errorf("%d waiters queued after the only one gave up", n)
			}
		})
	}
}

// pubsubVia is a client whose pub/sub connections go to another client's
// server (through a fault proxy), and whose other requests go to its own.
type pubsubVia struct {
	*redis.Client
	ps *redis.Client
}

func (c *pubsubVia) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return c.ps.Subscribe(ctx, channels...)
}

// A waiter whose subscription is not confirmed waits driver.ConfirmWait
// for the confirmation, the time every backend waits, before it tries
// again; when the confirmation comes later, it wakes the waiter. Here the
// SUBSCRIBE is held back in the network: the holder's release reaches
// nobody, and only the late confirmation serves the waiter before its
// fallback timer (an hour).
func TestSubscriptionConfirmWait(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	proxy := faultproxy.Start(t, srv.Addr)
	b := mustNew(t, &pubsubVia{Client: newClient(t, srv.Addr), ps: newClient(t, proxy.Addr())},
		redislock.WithWaiterLiveness(time.Hour))
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Backend.Close: %v", err)
		}
	})
	redislock.SetLinger(b, time.Millisecond)
	var (
		mu               sync.Mutex
		firstHeld, slept time.Time
	)
	sleeping := make(chan struct{}, 1)
	redislock.SetWaitHooks(b,
		func() {
			mu.Lock()
			firstHeld = time.Now()
			mu.Unlock()
		},
		func() {
			mu.Lock()
			slept = time.Now()
			mu.Unlock()
			select {
			case sleeping <- struct{}{}:
			default:
			}
		})
	holder := newBackend(t, srv.Addr)
	const key = "confirm-wait"
	const hold = time.Hour
	// A first wait, confirmed, opens the pub/sub connection; its
	// subscription lapses once the waiter is served (linger 1ms).
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: hold})
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan driver.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("first waiter: %v", err)
		}
		res <- l
	}()
	<-sleeping
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := <-res; l == nil || l.Release(ctx) != nil {
		t.Fatal("the first waiter got no lock to release")
	}
	// The first waiter may have slept more than once (a confirmation
	// wakes the waiters that have tried, and the waiter may have tried as
	// soon as it saw the confirmation): forget it.
	select {
	case <-sleeping:
	default:
	}
	ch := redislock.WakeChannel(b)
	eventually(t, time.Minute, "the first wait's subscription lapses", func() bool {
		return admin.PubSubNumSub(ctx, ch).Val()[ch] == 0
	})

	// The second wait's SUBSCRIBE is held back.
	if lh, err = holder.Acquire(ctx, key, driver.AcquireOptions{TTL: hold}); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("second waiter: %v", err)
		}
		res <- l
	}()
	select {
	case <-sleeping:
	case <-ctx.Done():
		t.Fatal("the second waiter never went to sleep")
	}
	mu.Lock()
	waited := slept.Sub(firstHeld)
	mu.Unlock()
	if waited < driver.ConfirmWait {
		t.Fatalf("the waiter tried again %v after its first try, without a confirmation; want at least driver.ConfirmWait (%v)", waited, driver.ConfirmWait)
	}
	t.Logf("without a confirmation, the waiter tried again after %v", waited)
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := admin.PubSubNumSub(ctx, ch).Val()[ch]; n != 0 {
		t.Fatalf("%d subscribers when the holder released: the SUBSCRIBE was not held back", n)
	}
	proxy.Heal()
	if l := <-res; l == nil || l.Release(ctx) != nil {
		t.Fatal("the second waiter got no lock to release")
	}
}
