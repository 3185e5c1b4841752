package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/redlock"
	"github.com/distlock/distlock/testserver"
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
	l, err := b.Acquire(r.ctx, r.key, driver.AcquireOptions{TTL: r.ttl})
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
			r := &recovery{t: t, ctx: testCtx(t), srvs: startNodes(t, 3), ttl: maxTTL, opts: []redlock.Option{redlock.WithMaxTTL(maxTTL), redlock.WithRequestTimeout(time.Second)}, key: "recover/" + t.Name()}
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

// scanGate is a hook of a node's client that holds every SCAN (a copy
// lists the counters of its sources with it) until open is closed, and
// counts the SCANs that gave up first, their context ended.
type scanGate struct {
	open   chan struct{}
	held   chan struct{} // receives when a SCAN is held
	gaveUp atomic.Int32
}

func (g *scanGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *scanGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (g *scanGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			select {
			case g.held <- struct{}{}:
			default:
			}
			select {
			case <-g.open:
			case <-ctx.Done():
				g.gaveUp.Add(1)
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// A try refused while a node's counters are due for their copy does not
// run the copy on its own time (the copy may scan every counter of a
// majority, for up to 30s, and a `distlock run --no-wait` that found the
// key held would wait for it): the copy runs in the background and
// lands. The try waits for it only when the copied node could let it
// win, and then only until its context ends. Here the copy's SCAN on a
// source node is held until the try returned: a try that waited for the
// copy returns only once that SCAN gave up, at the copy's timeout.
func TestRefusedTryLeavesTheCopyToTheBackground(t *testing.T) {
	for _, tc := range []struct {
		name    string
		holders []int // the nodes on which another grant holds the key
		waits   bool  // the copied node could let the try win
	}{
		{"held by a majority", []int{0, 1}, false},
		{"split vote", []int{0}, true},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			srvs := startNodes(t, 3)
			key := "copy/" + t.Name()
			tokenKey := redlock.DefaultPrefix + redislock.HashTag(key) + ":token"
			do := func(s *testserver.Redis, args ...string) any {
				t.Helper()
				v, err := s.Do(args...)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
			// Nodes 0 and 1 vote; node 2 lost its data, and its copy is
			// due (its vote is far off, so the copy marks it "c:").
			for _, s := range srvs[:2] {
				do(s, "SET", seedMarker, "ok")
				do(s, "SET", tokenKey, "7")
			}
			tm, _ := do(srvs[2], "TIME").([]any)
			sec, _ := strconv.ParseInt(fmt.Sprint(tm[0]), 10, 64)
			now := sec * 1000
			do(srvs[2], "SET", seedMarker, fmt.Sprintf("p:%d:%d:%d", now-2000, now-1000, now+600000))
			for _, i := range tc.holders {
				do(srvs[i], "SET", lockKey(key), fmt.Sprintf("other|7|%d|other", now), "PX", "60000")
			}
			gate := &scanGate{open: make(chan struct{}), held: make(chan struct{}, 1)}
			gated := newClient(t, srvs[1].Addr)
			gated.AddHook(gate)
			b, err := redlock.New([]redlock.Node{newClient(t, srvs[0].Addr), gated, newClient(t, srvs[2].Addr)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })

			ctx, cancel := context.WithCancel(testCtx(t))
			defer cancel()
			if tc.waits {
				// Given up once the copy is under way (held at its SCAN).
				go func() {
					select {
					case <-gate.held:
						cancel()
					case <-ctx.Done():
					}
				}()
			}
			_, err = b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
			switch {
			case tc.waits && !(errors.Is(err, distlock.ErrNotAcquired) && errors.Is(err, context.Canceled)):
				t.Errorf("Acquire: %v, want ErrNotAcquired and context.Canceled", err)
			case !tc.waits && (!errors.Is(err, distlock.ErrNotAcquired) || ctx.Err() != nil):
				t.Errorf("Acquire: %v, want ErrNotAcquired while the context is live", err)
			}
			if n := gate.gaveUp.Load(); n > 0 {
				t.Errorf("the refused try returned only after the copy gave up (%d SCANs timed out)", n)
			}
			close(gate.open)
			deadline := time.Now().Add(time.Minute)
			for !strings.HasPrefix(markerOf(srvs[2]), "c:") {
				if time.Now().After(deadline) {
					t.Fatalf("node 2 not copied after a minute: marker %q", markerOf(srvs[2]))
				}
				time.Sleep(10 * time.Millisecond)
			}
			var want int64
			for _, s := range srvs[:2] {
				v, _ := strconv.ParseInt(fmt.Sprint(do(s, "GET", tokenKey)), 10, 64)
				want = max(want, v)
			}
			if got := fmt.Sprint(do(srvs[2], "GET", tokenKey)); got != fmt.Sprint(want) {
				t.Errorf("node 2's counter after the copy: %s, want %d", got, want)
			}
		})
	}
}
