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
