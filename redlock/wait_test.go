package redlock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/redlock"
)

// pubsubVia is a node whose pub/sub connections go to another client's
// server (through a fault proxy), and whose other requests go to its own.
type pubsubVia struct {
	*redis.Client
	ps *redis.Client
}

func (n *pubsubVia) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return n.ps.Subscribe(ctx, channels...)
}

// tryTimes is a go-redis hook that records when each script was sent.
type tryTimes struct {
	mu    sync.Mutex
	times []time.Time
}

func (h *tryTimes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tryTimes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *tryTimes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" || cmd.Name() == "eval" {
			h.mu.Lock()
			h.times = append(h.times, time.Now())
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *tryTimes) get() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.times...)
}

// A waiter whose subscription is not confirmed waits driver.ConfirmWait
// for the confirmation, the time every backend waits, before it tries
// again; when the confirmation comes later, it wakes the waiter. Here the
// SUBSCRIBEs are held back in the network: the holder's release reaches
// nobody, and only the late confirmation serves the waiter before its
// fallback timer (the holder's TTL, 5 minutes).
func TestSubscriptionConfirmWait(t *testing.T) {
	srvs := startNodes(t, 3)
	ctx := testCtx(t)
	holder := newBackend(t, addrs(srvs))
	const key = "confirm-wait"
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: 5 * time.Minute, Owner: "holder"})
	if err != nil {
		t.Fatal(err)
	}

	tries := &tryTimes{}
	var nodes []redlock.Node
	var proxies []*faultproxy.Proxy
	for i, s := range srvs {
		p := faultproxy.Start(t, s.Addr)
		p.Blackhole()
		proxies = append(proxies, p)
		direct := newClient(t, s.Addr)
		if i == 0 {
			direct.AddHook(tries)
		}
		nodes = append(nodes, &pubsubVia{Client: direct, ps: newClient(t, p.Addr())})
	}
	b, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Backend.Close: %v", err)
		}
	})
	res := make(chan driver.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, key, waitOpts("waiter"))
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		res <- l
	}()
	eventually(t, time.Minute, "the waiter's second try", func() bool { return len(tries.get()) >= 2 })
	if got := tries.get(); got[1].Sub(got[0]) < driver.ConfirmWait {
		t.Fatalf("the waiter tried again %v after its first try, without a confirmation; want at least driver.ConfirmWait (%v)",
			got[1].Sub(got[0]), driver.ConfirmWait)
	} else {
		t.Logf("without a confirmation, the waiter tried again after %v", got[1].Sub(got[0]))
	}
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range srvs {
		if n := subscribedClients(t, s); n != 0 {
			t.Fatalf("%d subscribed clients when the holder released: the SUBSCRIBE was not held back", n)
		}
	}
	for _, p := range proxies {
		p.Heal()
	}
	select {
	case l := <-res:
		if l == nil || l.Release(ctx) != nil {
			t.Fatal("the waiter got no lock to release")
		}
	case <-ctx.Done():
		t.Fatal("the late confirmation did not wake the waiter")
	}
}

// cancelOnGrant is a go-redis hook that cancels a context once n acquire
// requests have been granted (a vote is the reply {1, counter}).
type cancelOnGrant struct {
	mu      sync.Mutex
	n       int
	granted int
	cancel  context.CancelFunc
}

func (h *cancelOnGrant) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cancelOnGrant) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *cancelOnGrant) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c, ok := cmd.(*redis.Cmd)
		if !ok {
			return err
		}
		if v, e := c.Int64Slice(); e == nil && len(v) == 2 && v[0] == 1 {
			h.mu.Lock()
			if h.granted++; h.granted == h.n {
				h.cancel()
			}
			h.mu.Unlock()
		}
		return err
	}
}

// A waiting Acquire whose context ends just as its try is granted on
// every node returns the grant, as a try granted in time does: an error
// would leave the key held by nobody until the grant's TTL ran out.
func TestGrantAsContextEnds(t *testing.T) {
	srvs := startNodes(t, 3)
	ctx := testCtx(t)
	const key = "grant-as-context-ends"
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := &cancelOnGrant{n: len(srvs), cancel: cancel}
	var nodes []redlock.Node
	for _, s := range srvs {
		c := newClient(t, s.Addr)
		c.AddHook(h)
		nodes = append(nodes, c)
	}
	b, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Backend.Close: %v", err)
		}
	})
	l, err := b.Acquire(wctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if wctx.Err() == nil {
		t.Fatal("the context did not end with the grant: the hook did not bite")
	}
	if err == nil {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release of the grant: %v", err)
		}
		return
	}
	other := newBackend(t, addrs(srvs))
	lo, terr := other.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if terr != nil {
		t.Fatalf("Acquire returned %v, and left the key held: %v", err, terr)
	}
	if err := lo.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
