package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/redislock"
)

var fairRows = flag.Int("fairrows", 0, "TestFairnessRows: rounds of the 64-waiter hand-off of the default Redis row, raw pg_advisory_lock and distlock Redlock, each round's order of grants analysed and the connections of the Redis and Redlock rows traced; RESULTS.md is not written")

// TestFairnessRows runs only the many-waiter hand-off rows whose fairness
// the no-herd goal judges (and the server queue and Redlock beside it), and tells, per round, why a waiter fell behind:
// the queue served waiters that asked after it (a wait spanning more grants
// than there are other waiters), or it came back to the queue late (a
// release, or the next Lock call, delayed). The Redis and Redlock rows
// run over connections that log their dials, closes and errors, so that a
// reconnect in a round is seen with who made it and why (a pool's dial
// runs on a goroutine of its own: its stack names go-redis's pool only).
func TestFairnessRows(t *testing.T) {
	if *fairRows <= 0 {
		t.Skip("measures for minutes: run with -fairrows N (rounds)")
	}
	// Each traced row has a trace of its own: the rows' rounds take turns.
	traces := map[string]*connTrace{"distlock-redis": {}, "distlock-redlock": {}}
	// pubsubs is how many pub/sub connections an instance of the row
	// dials at its first subscription: redislock one, redlock one per node.
	pubsubs := map[string]int{"distlock-redis": 1, "distlock-redlock": 5}
	var subs []Subject
	for _, s := range Subjects {
		switch s.ID {
		case "distlock-redis":
			s.Open = func(e *Env) (Locker, error) { return openTracedRedis(e, traces[s.ID]) }
			subs = append(subs, s)
		case "distlock-redlock":
			s.Open = func(e *Env) (Locker, error) { return openTracedRedlock(e, traces[s.ID]) }
			subs = append(subs, s)
		case "pg-advisory":
			subs = append(subs, s)
		}
	}
	p := FullParams
	p.ContentionWaiters = []int{herdWaiters}
	p.ContentionRounds = *fairRows
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	r := NewRunner(t, NewEnv(t), p, subs)
	lastEnd := map[string]time.Time{}
	r.roundDone = func(s Subject, n int, holds []holdRecord) {
		t.Logf("%s", describeRound(s.ID, n, holds))
		trace := traces[s.ID]
		if trace != nil && len(holds) > 0 {
			// Each Backend dials its pub/sub connections at its first
			// subscription: the warm-up should have made them all.
			warm := 0
			for _, ev := range trace.between(lastEnd[s.ID], holds[0].asked) {
				if strings.Contains(ev.what, "PubSub).conn") {
					warm++
				}
			}
			lastEnd[s.ID] = holds[len(holds)-1].released
			t.Logf("  pub/sub connections dialled before the round: %d of %d", warm, pubsubs[s.ID]*n)
			for _, ev := range trace.between(holds[0].asked, holds[len(holds)-1].released) {
				t.Logf("  conn: +%v %s", ev.at.Sub(holds[0].asked).Round(time.Microsecond), ev.what)
			}
		}
	}
	res := r.contention(ctx, herdWaiters)
	for _, s := range subs {
		cr := res[s.ID]
		t.Logf("%s: fairness per round %v, %d overtakes, %d requests for %d grants (%v)", s.ID, cr.Fairness, cr.Overtakes, cr.Delta.Requests, cr.Grants,
			breakdownRequests(cr.Delta, cr.Grants))
	}
}

// describeRound analyses one round's grants (sorted by acquisition).
func describeRound(id string, n int, holds []holdRecord) string {
	var b strings.Builder
	share := len(holds) / max(1, n)
	count := make([]int, n)
	var atFirst []int
	for _, h := range holds {
		count[h.g]++
		if count[h.g] == share && atFirst == nil {
			atFirst = slices.Clone(count)
		}
	}
	if atFirst == nil {
		atFirst = count
	}
	ratio, _ := fairness(atFirst)
	lo := slices.Min(atFirst)
	leader := slices.Index(atFirst, slices.Max(atFirst))
	fmt.Fprintf(&b, "%s: fairness %.3f (max %d, min %d), %d overtakes", id, ratio, slices.Max(atFirst), lo, overtakes(holds))

	// A wait spanning n or more grants to others means that some waiter
	// was served twice while this one waited: the second of those grants
	// it asked for after this waiter did, so the queue reordered them.
	var long []string
	var laterAsks, lateBack int
	maxBack := time.Duration(0)
	byWaiter := map[int][]holdRecord{}
	for _, h := range holds {
		byWaiter[h.g] = append(byWaiter[h.g], h)
	}
	for i, h := range holds {
		others := 0
		for j := range i {
			if holds[j].acquired.After(h.asked) && holds[j].g != h.g {
				others++
				if holds[j].asked.After(h.asked) {
					laterAsks++
				}
			}
		}
		if others >= n {
			long = append(long, fmt.Sprintf("waiter %d waited %v over %d grants", h.g, h.acquired.Sub(h.asked).Round(time.Microsecond), others))
		}
	}
	for g, hs := range byWaiter {
		for k := 1; k < len(hs); k++ {
			// From the end of the previous hold to the next Lock call: the
			// release call and the harness's own bookkeeping.
			back := hs[k].asked.Sub(hs[k-1].released)
			if back > maxBack {
				maxBack = back
			}
			if back > 10*time.Millisecond {
				lateBack++
				long = append(long, fmt.Sprintf("waiter %d came back %v after its release started (its grant %d)", g, back.Round(time.Microsecond), k+1))
			}
		}
	}
	// The start: how many waiters had their first grant only after some
	// waiter's second (they reached the queue after that one came back),
	// and after the first pass, the grants to a waiter whose previous grant
	// came after a still-waiting waiter asked (it asked later, surely).
	seen := make([]int, n)
	firstSecond, lateFirst, steadyOvertakes, startOvertakes := -1, 0, 0, 0
	for i, h := range holds {
		seen[h.g]++
		if seen[h.g] == 2 && firstSecond < 0 {
			firstSecond = i
		}
		if seen[h.g] == 1 && firstSecond >= 0 {
			lateFirst++
		}
	}
	for g, hs := range byWaiter {
		for k, h := range hs {
			for _, o := range holds {
				if o.g == g || !o.acquired.After(h.asked) || !o.acquired.Before(h.acquired) {
					continue
				}
				prev := byWaiter[o.g]
				pi := slices.IndexFunc(prev, func(x holdRecord) bool { return x.acquired.Equal(o.acquired) })
				if pi > 0 && prev[pi-1].acquired.After(h.asked) {
					if k == 0 {
						startOvertakes++
					} else {
						steadyOvertakes++
					}
				}
			}
		}
	}
	fmt.Fprintf(&b, "; first second grant at grant %d, first grants after it: %d; sure overtakes of a first wait %d, of a later wait %d",
		firstSecond+1, lateFirst, startOvertakes, steadyOvertakes)
	fmt.Fprintf(&b, "; grants to a waiter that asked later than a still-waiting one: %d; slowest return to the queue %v; returns over 10ms: %d",
		laterAsks, maxBack.Round(time.Microsecond), lateBack)
	for _, l := range long {
		fmt.Fprintf(&b, "\n  %s", l)
	}
	if ratio > herdFairness {
		var at []string
		for i, h := range holds {
			if h.g == leader && len(at) < 3 {
				at = append(at, fmt.Sprintf("grant %d (ask +%v)", i+1, h.asked.Sub(holds[0].asked).Round(time.Microsecond)))
			}
		}
		fmt.Fprintf(&b, "\n  leader: waiter %d: %s", leader, strings.Join(at, ", "))
	}
	// The waiters that were behind when the first had its share.
	for g, c := range atFirst {
		if c != lo || ratio <= herdFairness {
			continue
		}
		fmt.Fprintf(&b, "\n  behind: waiter %d:", g)
		t0 := holds[0].asked
		h := byWaiter[g][0]
		fmt.Fprintf(&b, " first ask +%v, granted +%v (grant %d of the round)", h.asked.Sub(t0).Round(time.Microsecond), h.acquired.Sub(t0).Round(time.Microsecond),
			slices.IndexFunc(holds, func(x holdRecord) bool { return x.g == g })+1)
	}
	return b.String()
}

// connTrace logs the dials, closes and I/O errors of traced connections.
type connTrace struct {
	mu     sync.Mutex
	events []connEvent
	next   atomic.Int64
}

type connEvent struct {
	at   time.Time
	what string
}

func (c *connTrace) add(format string, args ...any) {
	ev := connEvent{at: time.Now(), what: fmt.Sprintf(format, args...)}
	c.mu.Lock()
	c.events = append(c.events, ev)
	c.mu.Unlock()
}

func (c *connTrace) between(from, to time.Time) []connEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []connEvent
	for _, ev := range c.events {
		if !ev.at.Before(from) && !ev.at.After(to) {
			out = append(out, ev)
		}
	}
	return out
}

// callers names the go-redis and distlock functions on the stack.
func callers(skip int) string {
	pc := make([]uintptr, 40)
	n := runtime.Callers(skip, pc)
	frames := runtime.CallersFrames(pc[:n])
	var names []string
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "go-redis") || strings.Contains(f.Function, "distlock/redislock") || strings.Contains(f.Function, "distlock/redlock") || strings.Contains(f.Function, "distlock.") {
			fn := f.Function[strings.LastIndex(f.Function, "/")+1:]
			names = append(names, fn)
		}
		if !more || len(names) == 12 {
			break
		}
	}
	return strings.Join(names, " < ")
}

type tracedConn struct {
	net.Conn
	id     int64
	trace  *connTrace
	pubsub atomic.Bool
	failed atomic.Bool
}

func (c *tracedConn) Write(p []byte) (int, error) {
	if !c.pubsub.Load() && strings.Contains(strings.ToLower(string(p[:min(len(p), 40)])), "subscribe") {
		c.pubsub.Store(true)
	}
	n, err := c.Conn.Write(p)
	if err != nil && c.failed.CompareAndSwap(false, true) {
		c.trace.add("conn %d (pubsub %v): write: %v", c.id, c.pubsub.Load(), err)
	}
	return n, err
}

func (c *tracedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.failed.CompareAndSwap(false, true) {
		c.trace.add("conn %d (pubsub %v): read: %v", c.id, c.pubsub.Load(), err)
	}
	return n, err
}

func (c *tracedConn) Close() error {
	c.trace.add("conn %d (pubsub %v): close by %s", c.id, c.pubsub.Load(), callers(3))
	return c.Conn.Close()
}

// openTracedRedis is the default Redis row's instance over traced
// connections.
func openTracedRedis(e *Env, trace *connTrace) (Locker, error) {
	addr := e.Redis(1)[0]
	var d net.Dialer
	c := redis.NewClient(&redis.Options{Addr: addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &tracedConn{Conn: nc, id: trace.next.Add(1), trace: trace}
		trace.add("conn %d: dial by %s", tc.id, callers(3))
		return tc, nil
	}})
	c.AddHook(counter{n: &e.sent, by: &e.sentBy})
	b, err := redislock.New(c)
	if err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return newDistlockLocker(b, false, func() error { return errors.Join(b.Close(), c.Close()) })
}

// openTracedRedlock is the Redlock row's instance (5 nodes) over traced
// connections.
func openTracedRedlock(e *Env, trace *connTrace) (Locker, error) {
	var d net.Dialer
	return openRedlockDialed(e, 5, func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &tracedConn{Conn: nc, id: trace.next.Add(1), trace: trace}
		trace.add("conn %d (%s): dial by %s", tc.id, addr, callers(3))
		return tc, nil
	})
}
