package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redlock"
)

// requestCounter is a go-redis hook that counts the requests a client
// sends (each command of a pipeline counts).
type requestCounter struct{ n *atomic.Int64 }

func (h requestCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h requestCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h requestCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// RefreshAll renews many leases with one script call per node, where
// Refresh takes one per lease and node, and extends each of them on every
// node.
func TestRefreshAllOneRequestPerNode(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3)
	counts := make([]atomic.Int64, len(srvs))
	var nodes []redlock.Node
	for i, s := range srvs {
		c := newClient(t, s.Addr)
		c.AddHook(requestCounter{&counts[i]})
		nodes = append(nodes, c)
	}
	b := newBackendOf(t, nodes)
	const n = 100
	leases := make([]driver.Lease, n)
	for i := range leases {
		l, err := b.Acquire(ctx, fmt.Sprintf("batch/%d", i), driver.AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatalf("Acquire %d: %v", i, err)
		}
		leases[i] = l
	}
	refreshAll := func(ttl time.Duration) {
		t.Helper()
		for i, r := range b.RefreshAll(ctx, leases, ttl) {
			if r.Err != nil {
				t.Fatalf("RefreshAll: lease %d: %v", i, r.Err)
			}
			if r.Validity.TTL != ttl || r.Validity.Sent.IsZero() {
				t.Fatalf("RefreshAll: lease %d: validity %+v, want a TTL of %v", i, r.Validity, ttl)
			}
		}
	}
	refreshAll(20 * time.Second) // loads the script on every node
	// The straggler requests of the acquires are over once every node
	// holds every grant.
	eventually(t, 10*time.Second, "every node holds every grant", func() bool {
		for _, s := range srvs {
			if len(lockKeysOn(t, s)) != n {
				return false
			}
		}
		return true
	})
	for i := range counts {
		counts[i].Store(0)
	}
	refreshAll(time.Minute)
	for i := range counts {
		if got := counts[i].Load(); got != 1 {
			t.Errorf("node %d: %d requests to refresh %d leases, want 1", i+1, got, n)
		}
	}
	for i, s := range srvs {
		for _, key := range []string{"batch/0", fmt.Sprintf("batch/%d", n-1)} {
			v, err := s.Do("PTTL", b.KeyPath(key))
			if ms, ok := v.(int64); err != nil || !ok || ms <= (20*time.Second).Milliseconds() {
				t.Errorf("node %d: PTTL of %s %v (%v), want the minute RefreshAll set", i+1, key, v, err)
			}
		}
	}
	// Refresh, for comparison: one request per lease and node (and the
	// loading of its script).
	for i := range counts {
		counts[i].Store(0)
	}
	for _, l := range leases {
		if _, err := l.Refresh(ctx, time.Minute); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
	}
	eventually(t, 10*time.Second, "every node answered every Refresh", func() bool {
		for i := range counts {
			if counts[i].Load() < n {
				return false
			}
		}
		return true
	})
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

// RefreshAll reports each lease's own outcome: a lease that a majority
// of the nodes no longer holds is lost, the others are refreshed, a
// lease of another Backend is refused, and an invalid TTL fails them all.
func TestRefreshAllOutcomes(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3)
	b := newBackend(t, addrs(srvs))
	other := newBackend(t, addrs(srvs))
	acquire := func(b *redlock.Backend, key string) driver.Lease {
		t.Helper()
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatalf("Acquire %s: %v", key, err)
		}
		return l
	}
	kept, lost, minority, foreign := acquire(b, "outcomes/kept"), acquire(b, "outcomes/lost"), acquire(b, "outcomes/minority"), acquire(other, "outcomes/foreign")
	// Every node holds the grants before some are taken away.
	eventually(t, 10*time.Second, "every node holds every grant", func() bool {
		for _, s := range srvs {
			if len(lockKeysOn(t, s)) != 4 {
				return false
			}
		}
		return true
	})
	for _, s := range srvs[:2] {
		if _, err := s.Do("DEL", b.KeyPath("outcomes/lost")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srvs[2].Do("DEL", b.KeyPath("outcomes/minority")); err != nil {
		t.Fatal(err)
	}
	res := b.RefreshAll(ctx, []driver.Lease{kept, lost, foreign, minority}, time.Minute)
	if len(res) != 4 {
		t.Fatalf("%d results for 4 leases", len(res))
	}
	for _, i := range []int{0, 3} {
		if res[i].Err != nil || res[i].Validity.TTL != time.Minute {
			t.Errorf("lease %d, held on a majority: %+v, want refreshed to a minute", i, res[i])
		}
	}
	if !errors.Is(res[1].Err, distlock.ErrLockLost) {
		t.Errorf("lease lost on 2 of 3 nodes: %v, want ErrLockLost", res[1].Err)
	}
	if !errors.Is(res[2].Err, distlock.ErrInvalidOption) {
		t.Errorf("lease of another Backend: %v, want ErrInvalidOption", res[2].Err)
	}
	if v, err := srvs[2].Do("PTTL", b.KeyPath("outcomes/kept")); err != nil || v.(int64) <= (10*time.Second).Milliseconds() {
		t.Errorf("PTTL of the refreshed lease on node 3: %v (%v), want the minute", v, err)
	}
	for i, r := range b.RefreshAll(ctx, []driver.Lease{kept, minority}, -time.Second) {
		if !errors.Is(r.Err, distlock.ErrInvalidOption) {
			t.Errorf("lease %d refreshed to a negative TTL: %v, want ErrInvalidOption", i, r.Err)
		}
	}
	for _, l := range []driver.Lease{kept, minority, foreign} {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
	if err := lost.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release of the lost lease: %v, want ErrLockLost", err)
	}
}

// otherClient is a node whose client is not a *redis.Client, as a
// Cluster's is not: RefreshAll sends it one refresh.lua call per lease.
type otherClient struct{ *redis.Client }

// concurrency is a go-redis hook that, while armed, counts the script
// calls on their way at once, and holds each until want of them were
// (or its context ends), so that calls sent one after the other never
// get past the first.
type concurrency struct {
	want     int
	armed    atomic.Bool
	mu       sync.Mutex
	inflight int
	max      int
	reached  chan struct{} // closed once max reached want
}

func (h *concurrency) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *concurrency) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); !h.armed.Load() || (name != "evalsha" && name != "eval") {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		h.inflight++
		if h.inflight > h.max {
			h.max = h.inflight
			if h.max == h.want {
				close(h.reached)
			}
		}
		h.mu.Unlock()
		defer func() {
			h.mu.Lock()
			h.inflight--
			h.mu.Unlock()
		}()
		select {
		case <-h.reached:
		case <-ctx.Done():
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *concurrency) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// RefreshAll over a node whose client is not a *redis.Client sends its
// refresh.lua calls 16 at a time, not one after the other within one
// timeout (where the leases late in the list would get what the first
// left of it).
func TestRefreshAllOtherClientConcurrent(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3)
	const parallel = 16 // refreshParallel
	h := &concurrency{want: parallel, reached: make(chan struct{})}
	c := newClient(t, srvs[0].Addr)
	c.AddHook(h)
	b := newBackendOf(t, []redlock.Node{otherClient{c}, newClient(t, srvs[1].Addr), newClient(t, srvs[2].Addr)}, redlock.WithRequestTimeout(5*time.Second))
	const n = 100
	leases := make([]driver.Lease, n)
	for i := range leases {
		l, err := b.Acquire(ctx, fmt.Sprintf("other/%d", i), driver.AcquireOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatalf("Acquire %d: %v", i, err)
		}
		leases[i] = l
	}
	h.armed.Store(true)
	res := b.RefreshAll(ctx, leases, time.Minute)
	h.armed.Store(false)
	for i, r := range res {
		if r.Err != nil {
			t.Errorf("lease %d: %v", i, r.Err)
		}
	}
	h.mu.Lock()
	got := h.max
	h.mu.Unlock()
	if got != parallel {
		t.Errorf("%d refresh.lua calls on their way to the node at most, want %d", got, parallel)
	}
	// Each call extended its grant on the node, the last as the first.
	for i := range n {
		key := fmt.Sprintf("other/%d", i)
		v, err := srvs[0].Do("PTTL", b.KeyPath(key))
		if ms, ok := v.(int64); err != nil || !ok || ms <= (30*time.Second).Milliseconds() {
			t.Errorf("node 1: PTTL of %s %v (%v), want the minute RefreshAll set", key, v, err)
		}
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
}
