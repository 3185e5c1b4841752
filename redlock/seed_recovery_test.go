package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/redlock"
)

// seedMarker is the seed marker key of the default prefix.
const seedMarker = redlock.DefaultPrefix + "node:seed"

// markerOf reads s's seed marker ("" when it has none or does not answer).
func markerOf(s *testserver.Redis) string {
	v, _ := s.Do("GET", seedMarker)
	m, _ := v.(string)
	return m
}

// recovery drives cycles of one key over three nodes, as one long-lived
// Backend or as many short-lived ones (each made for one cycle and closed
// after it, as `distlock run` processes are), and checks that every
// cycle is granted with a token above every earlier one.
type recovery struct {
	t      *testing.T
	ctx    context.Context
	ttl    time.Duration // the Backends' longest TTL, and the cycles' TTL
	srvs   []*testserver.Redis
	opts   []redlock.Option
	shared *redlock.Backend // nil: a Backend per cycle
	key    string
	last   uint64
	cycles int
}

// cycle acquires the key without waiting and releases it: any two nodes
// that vote grant it. A cycle that is refused fails the test.
func (r *recovery) cycle() {
	r.t.Helper()
	if err := r.try(); err != nil {
		r.t.Fatalf("cycle %d: %v (markers %q)", r.cycles+1, err, r.markers())
	}
}

// try is a cycle that may find too few nodes voting: it reports that
// error; any other failure fails the test.
func (r *recovery) try() error {
	r.t.Helper()
	b := r.shared
	if b == nil {
		var nodes []redlock.Node
		for _, s := range r.srvs {
			c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, DialTimeout: time.Second, MaxRetries: -1})
			defer c.Close()
			nodes = append(nodes, c)
		}
		var err error
		if b, err = redlock.New(nodes, r.opts...); err != nil {
			r.t.Fatal(err)
		}
		defer func() {
			if err := b.Close(); err != nil {
				r.t.Errorf("Close: %v", err)
			}
		}()
	}
	l, err := b.Acquire(r.ctx, r.key, distlock.AcquireOptions{TTL: r.ttl})
	if errors.Is(err, distlock.ErrUnavailable) {
		return err
	}
	if err != nil {
		r.t.Fatalf("cycle %d: Acquire: %v (markers %q)", r.cycles+1, err, r.markers())
	}
	if l.Token() <= r.last {
		r.t.Fatalf("cycle %d: token %d after %d", r.cycles+1, l.Token(), r.last)
	}
	r.last = l.Token()
	r.cycles++
	if err := l.Release(r.ctx); err != nil {
		r.t.Fatalf("cycle %d: Release: %v", r.cycles, err)
	}
	return nil
}

func (r *recovery) markers() []string {
	var out []string
	for _, s := range r.srvs {
		out = append(out, markerOf(s))
	}
	return out
}

// until tries cycles, paced a little, until cond holds; within limit.
// While two of the three nodes wait, no cycle is granted.
func (r *recovery) until(what string, limit time.Duration, cond func() bool) time.Duration {
	r.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			r.t.Fatalf("%s: not after %v and %d cycles (markers %q)", what, limit, r.cycles, r.markers())
		}
		r.try()
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// A node restarted empty votes again once its wait is over, whoever uses
// the deployment: one Backend that lives through the wait, or only
// Backends that each live far less than it (one cycle, milliseconds), as
// with `distlock run`. Its wait and its re-seeding are facts kept on the
// node, which any of them acts on. So does a rolling restart: two nodes
// restarted empty one after the other, the second once the first's
// counters were copied, both vote again by themselves. Once they vote,
// the other node can go down and grants go on; tokens increase
// throughout.
func TestRestartedNodesRecover(t *testing.T) {
	// A rolling restart's second node is restarted while the first still
	// waits: its longest TTL leaves time for that after the copy.
	for _, tc := range []struct {
		name     string
		shared   bool
		restarts []int
		maxTTL   time.Duration
	}{
		{"one node, short-lived Backends", false, []int{0}, 2 * time.Second},
		{"one node, one Backend", true, []int{0}, 2 * time.Second},
		{"rolling restart, short-lived Backends", false, []int{0, 1}, 4 * time.Second},
		{"rolling restart, one Backend", true, []int{0, 1}, 4 * time.Second},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			maxTTL := tc.maxTTL
			r := &recovery{t: t, ctx: testCtx(t), srvs: startNodes(t, 3), ttl: maxTTL, opts: []redlock.Option{redlock.WithMaxTTL(maxTTL), redlock.WithNodeTimeout(time.Second)}, key: "recover/" + t.Name()}
			if tc.shared {
				r.shared = newBackend(t, addrs(r.srvs), r.opts...)
			}
			r.cycle() // marks the new deployment
			restarted := make([]time.Time, len(r.srvs))
			for i, n := range tc.restarts {
				if i > 0 {
					// The next restart once the last node's counters are
					// copied, while it still waits to vote ("c:<ms>"):
					// a majority of the nodes then lacks the grants and
					// counters of before the first restart.
					prev := r.srvs[tc.restarts[i-1]]
					took := r.until("the node restarted before copied", time.Minute, func() bool {
						return strings.HasPrefix(markerOf(prev), "c:")
					})
					t.Logf("node %d copied %v after its restart", tc.restarts[i-1], took)
				}
				r.srvs[n].Kill()
				r.srvs[n].Restart(t)
				restarted[n] = time.Now()
			}
			for _, n := range tc.restarts {
				r.until("restarted node votes again", time.Minute, func() bool { return markerOf(r.srvs[n]) == "ok" })
				t.Logf("node %d votes again %v after its restart (%d cycles)", n, time.Since(restarted[n]).Round(time.Millisecond), r.cycles)
				// It must not vote before every grant it forgot expired.
				if d := time.Since(restarted[n]); d < maxTTL {
					t.Errorf("node %d votes again %v after its restart, before the longest TTL (%v)", n, d, maxTTL)
				}
			}
			// Redundancy is back: with a node that kept its data down,
			// the restarted ones are part of every majority.
			for i, s := range r.srvs {
				if !contains(tc.restarts, i) {
					s.Kill()
					break
				}
			}
			before := r.last
			r.cycle()
			t.Logf("with the restarted nodes making the majority: token %d after %d", r.last, before)
		})
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
