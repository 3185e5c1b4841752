package redlock

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// A new deployment being marked "ok" by one Backend while another's round
// reads the markers: the round sees some nodes marked and the others not
// yet, and marks those waiting, as nodes that lost their data. The first
// Backend's "ok" takes such a wait back, within markGrace of its marking:
// marked waiting, the nodes of the new deployment would not vote for the
// longest TTL (five minutes by default), and with two of three the key
// could not be granted at all. A wait older than that stays.
func TestNewDeploymentMarkRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srvs, b := threeNodeBackend(t)
	other, err := New(b.nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })

	// The other Backend's round found every node without a marker, and its
	// first mark landed: node 0 has its "ok", nodes 1 and 2 not yet. This
	// Backend's round sees that and marks nodes 1 and 2 waiting.
	if _, err := srvs[0].Do("SET", b.marker(), "ok"); err != nil {
		t.Fatal(err)
	}
	b.seed(ctx, countVotes([]reply[vote]{{val: vote{status: voteGranted, val: 1}}, {val: vote{status: voteUnseeded}}, {val: vote{status: voteUnseeded}}}))
	for i, s := range srvs[1:] {
		if v, _ := s.Do("GET", b.marker()); !strings.HasPrefix(fmt.Sprint(v), "p:") {
			t.Fatalf("node %d's marker is %v, want a wait", i+1, v)
		}
	}
	// Node 2's wait is older than the grace (marked by hand 2s back).
	if _, err := srvs[2].Do("EVAL", "local t = redis.call('TIME'); local now = t[1] * 1000 - 2000; redis.call('SET', KEYS[1], 'p:' .. now .. ':' .. now .. ':' .. (now + 300000))", "1", b.marker()); err != nil {
		t.Fatal(err)
	}
	// Now the other Backend's marks land.
	other.seed(ctx, countVotes([]reply[vote]{{val: vote{status: voteUnseeded}}, {val: vote{status: voteUnseeded}}, {val: vote{status: voteUnseeded}}}))
	for i, s := range srvs {
		v, err := s.Do("GET", b.marker())
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 2; want != (v == "ok") {
			t.Errorf("node %d's marker is %v after a new deployment's marks; want ok: %v", i, v, want)
		}
	}
}

// A node that lost its data while the others vote is marked waiting by
// the round that meets it: when it was found so, when its counters may be
// copied (copyDelay later), and when it may vote (the longest TTL and the
// drift later), in the node's own clock.
func TestLostNodeMarkedWaiting(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const maxTTL = 10 * time.Second
	srvs, b := threeNodeBackend(t, WithMaxTTL(maxTTL))
	for _, s := range srvs[:2] {
		if _, err := s.Do("SET", b.marker(), "ok"); err != nil {
			t.Fatal(err)
		}
	}
	b.seed(ctx, countVotes([]reply[vote]{{val: vote{status: voteHeld, val: 1}}, {val: vote{status: voteGranted, val: 1}}, {val: vote{status: voteUnseeded}}}))
	v, err := srvs[2].Do("GET", b.marker())
	if err != nil {
		t.Fatal(err)
	}
	var since, copyAt, due int64
	if n, _ := fmt.Sscanf(fmt.Sprint(v), "p:%d:%d:%d", &since, &copyAt, &due); n != 3 {
		t.Fatalf("node 2's marker is %v, want p:<since>:<copy>:<due>: the node that lost its data must wait", v)
	}
	if got, want := copyAt-since, ceilMillis(copyDelay()); got != want {
		t.Errorf("copy %dms after it was found, want %dms", got, want)
	}
	if got, want := due-since, ceilMillis(maxTTL+drift(maxTTL)); got != want {
		t.Errorf("vote %dms after it was found, want %dms", got, want)
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
