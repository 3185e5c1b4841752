package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/redlock"
	"github.com/distlock/distlock/testserver"
)

// The holder of one key (Holder, WatchHolder) and the election suite
// against real nodes: a watch is woken by the nodes' holder channels.
func TestHolderAndElection(t *testing.T) {
	srvs := startNodes(t, 3)
	factory := func(t *testing.T) driver.Backend { return newBackend(t, addrs(srvs)) }
	opts := []distlocktest.Option{
		distlocktest.WithTTL(time.Second),
		distlocktest.WithRevoke(func(t *testing.T, key string) {
			for _, s := range srvs {
				if _, err := s.Do("DEL", lockKey(key)); err != nil {
					t.Fatalf("DEL on %s: %v", s.Addr, err)
				}
			}
		}),
		distlocktest.WithLeakOptions(goRedisDialProbe),
	}
	t.Run("Holder", func(t *testing.T) { distlocktest.RunHolder(t, factory, opts...) })
	t.Run("Election", func(t *testing.T) { distlocktest.RunElection(t, factory, opts...) })
}

// Holder reports the grant a majority of the nodes hold, as List does: a
// grant on a minority of the nodes is no holder.
func TestHolderIsTheMajorityView(t *testing.T) {
	srvs := startNodes(t, 3)
	b := newBackend(t, addrs(srvs))
	ctx := testCtx(t)
	key := "svc/leader"
	value := fmt.Sprintf("secret|7|%d|owner", time.Now().UnixMilli())
	set := func(s *testserver.Redis) {
		t.Helper()
		if _, err := s.Do("SET", lockKey(key), value, "PX", "600000"); err != nil {
			t.Fatal(err)
		}
	}
	set(srvs[0])
	if h, held, err := b.Holder(ctx, key); held || err != nil {
		t.Errorf("Holder() with the grant on 1 node of 3 = %+v, %v, %v; want none", h, held, err)
	}
	set(srvs[2])
	h, held, err := b.Holder(ctx, key)
	if !held || err != nil || h.Token != 7 || h.Owner != "owner" || h.Expires.IsZero() {
		t.Errorf("Holder() with the grant on 2 nodes of 3 = %+v, %v, %v; want token 7", h, held, err)
	}
	hs, err := b.List(ctx, key)
	if err != nil || len(hs) != 1 || hs[0].Token != h.Token || hs[0].Owner != h.Owner {
		t.Errorf("List() = %+v, %v; want what Holder read, %+v", hs, err, h)
	}
}

// Close waits for the goroutine of a watch that is still live, even with
// a re-mark of its markers under way: before, the goroutine outlived
// Close, using the nodes after it (which OpenURL's Backend closes).
func TestCloseWaitsForWatch(t *testing.T) {
	srvs := startNodes(t, 3)
	remarking := make(chan struct{}, 1)
	var block atomic.Bool
	var nodes []redlock.Node
	for _, s := range srvs {
		c := newClient(t, s.Addr)
		c.AddHook(blockRemarks{block: &block, remarking: remarking})
		nodes = append(nodes, c)
	}
	b := newBackendOf(t, nodes)
	redlock.SetRemarkPeriod(b, 10*time.Millisecond)
	out, err := b.WatchHolder(context.Background(), "k") // a watch that never ends by itself
	if err != nil {
		t.Fatal(err)
	}
	block.Store(true)
	select {
	case <-remarking:
	case <-time.After(time.Minute):
		t.Fatal("no re-mark of the watch marker")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case _, ok := <-out:
			if !ok {
				return
			}
		default:
			t.Fatal("the watch's goroutine outlived Close: its channel is open")
		}
	}
}

// blockRemarks is a go-redis hook that, once block is set, holds every
// run of the watch script (the re-marks) until its context ends, and
// tells remarking when one is held.
type blockRemarks struct {
	block     *atomic.Bool
	remarking chan struct{}
}

func (h blockRemarks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h blockRemarks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h blockRemarks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		isMark := false
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.HasSuffix(s, ":watched") {
				isMark = true
			}
		}
		if !isMark || !h.block.Load() {
			return next(ctx, cmd)
		}
		select {
		case h.remarking <- struct{}{}:
		default:
		}
		<-ctx.Done()
		cmd.SetErr(ctx.Err())
		return ctx.Err()
	}
}

// holderChannel is the holder channel of key, per the documented layout.
func holderChannel(key string) string {
	return redlock.DefaultPrefix + redislock.HashTag(key) + ":holder"
}

// nextWake waits for a wake-up of a watch, pushed by the nodes: the
// Backend's watch does not poll.
func nextWake(t *testing.T, out <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-out:
		if !ok {
			t.Fatalf("%s: the watch ended", what)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no wake-up", what)
	}
}

// With one node of five down, a watch is set on the four others and woken
// by them: every majority has a live node. (It failed before, waiting for
// the down node's confirmation, and the watcher polled.)
func TestWatchWithANodeDown(t *testing.T) {
	srvs := startNodes(t, 5)
	ctx := testCtx(t)
	b, other := newBackend(t, addrs(srvs)), newBackend(t, addrs(srvs))
	const key = "down/watched"
	cycle(t, ctx, other, key) // the deployment exists: its nodes vote
	srvs[3].Kill()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out, err := b.WatchHolder(wctx, key)
	if err != nil {
		t.Fatalf("WatchHolder with one node of five down: %v", err)
	}
	l, err := other.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	nextWake(t, out, "the grant")
	if h, held, err := b.Holder(ctx, key); !held || err != nil || h.Token != l.Token() {
		t.Errorf("Holder() after the grant = %+v, %v, %v; want token %d", h, held, err, l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	nextWake(t, out, "the release")
}

// A key's holder channel is unsubscribed on every node once its last
// watch has ended (after a linger), and a later watch subscribes again
// and is woken. (The Backend stayed subscribed until Close before.)
func TestHolderChannelUnsubscribedAfterWatch(t *testing.T) {
	srvs := startNodes(t, 3)
	ctx := testCtx(t)
	b, other := newBackend(t, addrs(srvs)), newBackend(t, addrs(srvs))
	const key = "unwatched"
	ch := holderChannel(key)
	numSub := func(s *testserver.Redis) int64 {
		t.Helper()
		v, err := s.Do("PUBSUB", "NUMSUB", ch)
		if err != nil {
			t.Fatal(err)
		}
		return v.([]any)[1].(int64)
	}
	watch := func(ctx context.Context) <-chan struct{} {
		t.Helper()
		out, err := b.WatchHolder(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for round := range 2 {
		wctx, cancel := context.WithCancel(ctx)
		out := watch(wctx)
		for i, s := range srvs { // the watch is set once two of three confirmed
			eventually(t, 30*time.Second, fmt.Sprintf("round %d: node %d subscribed to %s", round, i, ch), func() bool { return numSub(s) == 1 })
		}
		l, err := other.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		nextWake(t, out, fmt.Sprintf("round %d: the grant", round))
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		for range out { // closed when the watch ends
		}
		for i, s := range srvs {
			eventually(t, 30*time.Second, fmt.Sprintf("round %d: node %d unsubscribed from %s", round, i, ch), func() bool { return numSub(s) == 0 })
		}
	}
}

// hungNode is a Backend of three nodes whose third node's connections go
// through a fault proxy, watching key.
type hungNode struct {
	t     *testing.T
	srvs  []*testserver.Redis
	proxy *faultproxy.Proxy
	b     *redlock.Backend
	ch    string
}

func newHungNode(t *testing.T, key string) *hungNode {
	t.Helper()
	srvs := startNodes(t, 3)
	proxy := faultproxy.Start(t, srvs[2].Addr)
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1, ReadTimeout: 10 * time.Second})
	t.Cleanup(func() { slow.Close() })
	b := newBackendOf(t, []redlock.Node{newClient(t, srvs[0].Addr), newClient(t, srvs[1].Addr), slow})
	t.Cleanup(proxy.Heal) // before b's Close, which would wait for the node
	return &hungNode{t: t, srvs: srvs, proxy: proxy, b: b, ch: holderChannel(key)}
}

// numSub is how many connections node i has subscribed to the holder
// channel.
func (h *hungNode) numSub(i int) int64 {
	h.t.Helper()
	v, err := h.srvs[i].Do("PUBSUB", "NUMSUB", h.ch)
	if err != nil {
		h.t.Fatal(err)
	}
	return v.([]any)[1].(int64)
}

// hang watches key until the third node has subscribed, then blackholes
// and breaks the node's connections (go-redis's reconnection hangs,
// holding the node's pub/sub connection), ends the watch, and waits for
// the channel's expiry to unsubscribe the first node: the UNSUBSCRIBE
// to the third is on its way and hangs.
func (h *hungNode) hang(ctx context.Context, key string) {
	h.t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	out, err := h.b.WatchHolder(wctx, key)
	if err != nil {
		h.t.Fatal(err)
	}
	eventually(h.t, 30*time.Second, "node 2 subscribed", func() bool { return h.numSub(2) == 1 })
	h.proxy.Blackhole()
	h.proxy.Reset()
	cancel()
	for range out {
	}
	eventually(h.t, 30*time.Second, "node 0 unsubscribed", func() bool { return h.numSub(0) == 0 })
}

// A watch begun while the UNSUBSCRIBE of its key's channel to a hung node
// is on its way is set by the two other nodes of three: a majority up
// suffices. (It failed before with ErrUnavailable: its SUBSCRIBEs waited
// for every node's UNSUBSCRIBE.)
func TestWatchNotHeldByAHungUnsubscribe(t *testing.T) {
	const key = "hung/unsubscribe"
	h := newHungNode(t, key)
	ctx := testCtx(t)
	h.hang(ctx, key)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := h.b.WatchHolder(wctx, key); err != nil {
		t.Fatalf("WatchHolder with nodes 0 and 1 up: %v", err)
	}
}

// Watches that start and end while a node hangs leave no node subscribed
// to the key's channel once the node is back: each node gets its
// SUBSCRIBEs and UNSUBSCRIBEs of the channel in the order they were
// decided. (An expiry's UNSUBSCRIBE raced the next watch's SUBSCRIBE on
// each node before, and did not wait for the channel's own SUBSCRIBEs:
// a node could stay subscribed with no watcher.)
func TestHungNodeLeftUnsubscribed(t *testing.T) {
	const key = "hung/orphan"
	h := newHungNode(t, key)
	ctx := testCtx(t)
	h.hang(ctx, key)
	// A second watch: its SUBSCRIBE to node 2 follows the hung
	// UNSUBSCRIBE, and its expiry's UNSUBSCRIBE follows that.
	wctx, cancel := context.WithCancel(ctx)
	out, err := h.b.WatchHolder(wctx, key)
	if err != nil {
		t.Fatalf("WatchHolder with nodes 0 and 1 up: %v", err)
	}
	for i := range 2 {
		eventually(t, 30*time.Second, fmt.Sprintf("node %d subscribed for the second watch", i), func() bool { return h.numSub(i) == 1 })
	}
	cancel()
	for range out {
	}
	for i := range 2 { // the second watch's channel expired
		eventually(t, 30*time.Second, fmt.Sprintf("node %d unsubscribed after the second watch", i), func() bool { return h.numSub(i) == 0 })
	}
	h.proxy.Heal()
	eventually(t, 60*time.Second, "every (un)subscription sent", func() bool { return !redlock.HolderSending(h.b, h.ch) })
	// Node 2's connection is back once it has the Backend's wake channel;
	// go-redis subscribed it again to every channel it kept, at once.
	eventually(t, 60*time.Second, "node 2's pub/sub connection back", func() bool {
		v, err := h.srvs[2].Do("PUBSUB", "CHANNELS", redlock.DefaultPrefix+"*")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range v.([]any) {
			if c != h.ch {
				return true
			}
		}
		return false
	})
	for i := range h.srvs {
		eventually(t, 30*time.Second, fmt.Sprintf("node %d unsubscribed with no watch left", i), func() bool { return h.numSub(i) == 0 })
	}
}
