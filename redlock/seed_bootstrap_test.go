package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// A new deployment being marked "ok" by one Backend while another's round
// reads the markers: the round sees some nodes marked and the others not
// yet. Those must not be taken for nodes that lost their data: marked
// waiting, they would not vote for the longest TTL (five minutes by
// default), and with two of three the key could not be granted at all.
func TestNewDeploymentMarkRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srvs, b := threeNodeBackend(t)
	over := make(chan struct{}, 1)
	markedLater = func() { over <- struct{}{} }
	defer func() { markedLater = nil }()

	// The other Backend's marks: node 0 has its "ok", nodes 1 and 2 not yet.
	if _, err := srvs[0].Do("SET", b.marker(), "ok"); err != nil {
		t.Fatal(err)
	}
	b.seed(ctx, round{normal: []int{0}, unseeded: []int{1, 2}, why: make([]string, 3), waitEnd: make([]int64, 3)})
	// Now they land, as the other Backend's (SET NX) would.
	for _, s := range srvs[1:] {
		if _, err := s.Do("SET", b.marker(), "ok", "NX"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-over:
	case <-time.After(30 * time.Second):
		t.Fatal("the later mark did not end in 30s")
	}
	for i, s := range srvs {
		v, err := s.Do("GET", b.marker())
		if err != nil {
			t.Fatal(err)
		}
		if v != "ok" {
			t.Errorf("node %d's marker is %v, want ok: a node of the new deployment was set waiting", i, v)
		}
	}
}

// A node that lost its data while the others vote is still marked
// waiting, markGrace after a round met it.
func TestLostNodeMarkedLater(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srvs, b := threeNodeBackend(t)
	over := make(chan struct{}, 1)
	markedLater = func() { over <- struct{}{} }
	defer func() { markedLater = nil }()
	for _, s := range srvs[:2] {
		if _, err := s.Do("SET", b.marker(), "ok"); err != nil {
			t.Fatal(err)
		}
	}
	b.seed(ctx, round{normal: []int{0, 1}, unseeded: []int{2}, why: make([]string, 3), waitEnd: make([]int64, 3)})
	select {
	case <-over:
	case <-time.After(30 * time.Second):
		t.Fatal("the later mark did not end in 30s")
	}
	v, err := srvs[2].Do("GET", b.marker())
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := v.(string); len(s) < 2 || s[:2] != "p:" {
		t.Errorf("node 2's marker is %v, want p:<ms>: the node that lost its data must wait", v)
	}
}

// A Backend that has seen the deployment's nodes vote does not take them
// for a new deployment when it finds every one without a marker (they
// all lost their data): marked "ok" at once, they would vote with their
// counters and grants gone, and tokens would start over.
func TestTotalLossIsNotANewDeployment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srvs, b := threeNodeBackend(t)
	l, err := b.Acquire(ctx, "total", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range srvs {
		if _, err := s.Do("FLUSHALL"); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := b.Acquire(ctx, "total", driver.AcquireOptions{TTL: time.Minute}); err == nil {
		t.Errorf("granted token %d by nodes that all lost their data", l.Token())
		l.Release(ctx)
	}
	for i, s := range srvs {
		if v, _ := s.Do("GET", b.marker()); v == "ok" {
			t.Errorf("node %d was marked ok after it lost its data", i)
		}
	}
}

// threeNodeBackend starts three redis-servers and returns them with a
// Backend over them, closed when the test ends.
func threeNodeBackend(t *testing.T, opts ...Option) ([]*testserver.Redis, *Backend) {
	t.Helper()
	var srvs []*testserver.Redis
	var nodes []Node
	for range 3 {
		s := testserver.StartRedis(t)
		srvs = append(srvs, s)
		c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		nodes = append(nodes, c)
	}
	b, err := New(nodes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return srvs, b
}
