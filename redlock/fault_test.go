package redlock_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/redlock"
	"github.com/distlock/distlock/testserver"
)

// lockKeysOn returns the lock keys present on s.
func lockKeysOn(t *testing.T, s *testserver.Redis) []any {
	t.Helper()
	v, err := s.Do("KEYS", redlock.DefaultPrefix+"*:lock")
	if err != nil {
		t.Fatalf("KEYS on %s: %v", s.Addr, err)
	}
	keys, _ := v.([]any)
	return keys
}

// cycle acquires key without waiting and releases it, returning the token.
func cycle(t *testing.T, ctx context.Context, b *redlock.Backend, key string) uint64 {
	t.Helper()
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	return l.Token()
}

// Two of five nodes down: locks still work, tokens keep increasing. Three
// of five down: Acquire fails with ErrUnavailable naming the unreachable
// nodes, and leaves no lock key on the two live ones.
//
// A node is down here when its server is killed: its requests fail at
// once. A live node whose reply misses the per-node timeout counts as down
// as well, as it must, and a loaded machine can make it miss it. The test
// is of the quorum, not of the nodes' speed: the timeout is 1s rather than
// the default (a tenth of the TTL, 200ms), and a step during which a
// request to a live node timed out all the same is tried again, once the
// key is gone from the live nodes, up to stallTries times; the test fails
// if every try of a step stalled so, and at once when a step fails with
// no such timeout.
func TestMinorityAndMajorityDown(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 5)
	timeouts := make([]atomic.Int64, len(srvs)) // by node: its requests that timed out
	var nodes []redlock.Node
	for i, s := range srvs {
		c := newClient(t, s.Addr)
		c.AddHook(timeoutCounter{&timeouts[i]})
		nodes = append(nodes, c)
	}
	b := newBackendOf(t, nodes, redlock.WithRequestTimeout(time.Second))
	key := "down/" + t.Name()
	opts := driver.AcquireOptions{TTL: 2 * time.Second}
	step := func(what string, live []int, try func() error) {
		t.Helper()
		timedOut := func() (n int64) {
			for _, i := range live {
				n += timeouts[i].Load()
			}
			return n
		}
		for n := 1; ; n++ {
			before := timedOut()
			err := try()
			switch {
			case err == nil:
				return
			case timedOut() == before:
				t.Fatalf("%s: %v", what, err)
			case n == stallTries:
				t.Fatalf("%s: a request to a live node timed out in each of %d tries, the last: %v", what, n, err)
			}
			t.Logf("%s, try %d: a request to a live node timed out (%v); trying again once the key is gone", what, n, err)
			for _, i := range live {
				eventually(t, time.Minute, fmt.Sprintf("the stalled try's grant gone from node %d", i), func() bool {
					v, err := srvs[i].Do("EXISTS", lockKey(key))
					return err == nil && v == int64(0)
				})
			}
		}
	}
	var last uint64
	cycle := func() error {
		l, err := b.Acquire(ctx, key, opts)
		if err != nil {
			return fmt.Errorf("Acquire: %w", err)
		}
		if l.Token() <= last {
			t.Fatalf("token %d after %d", l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			return fmt.Errorf("Release: %w", err)
		}
		return nil
	}
	step("all five up", []int{0, 1, 2, 3, 4}, cycle)
	srvs[1].Kill()
	srvs[3].Kill()
	for i := range 10 {
		step(fmt.Sprintf("two of five down, cycle %d", i), []int{0, 2, 4}, cycle)
	}
	srvs[4].Kill()
	step("three of five down", []int{0, 2}, func() error {
		_, err := b.Acquire(ctx, key, opts)
		if !errors.Is(err, distlock.ErrUnavailable) || errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("Acquire with three of five down: %v, want ErrUnavailable", err)
		}
		for _, i := range []int{1, 3, 4} {
			if !strings.Contains(err.Error(), srvs[i].Addr) {
				t.Errorf("the error does not name the unreachable node %s: %v", srvs[i].Addr, err)
			}
		}
		var problems []string
		for _, i := range []int{0, 2} {
			if strings.Contains(err.Error(), srvs[i].Addr) {
				problems = append(problems, fmt.Sprintf("the error names the live node %s: %v", srvs[i].Addr, err))
			}
			if keys := lockKeysOn(t, srvs[i]); len(keys) != 0 {
				problems = append(problems, fmt.Sprintf("live node %s keeps %v after the failed Acquire", srvs[i].Addr, keys))
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		t.Logf("three of five down: %v", err)
		return nil
	})
}

// stallTries is how many times TestMinorityAndMajorityDown tries a step
// during which a request to a live node timed out.
const stallTries = 3

// timeoutCounter is a go-redis hook that counts the requests of its client
// that ended in a timeout: the per-node timeout, or a dial or read that
// timed out.
type timeoutCounter struct{ n *atomic.Int64 }

func (h timeoutCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h timeoutCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h timeoutCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			h.n.Add(1)
		}
		return err
	}
}

// A node restarted without persistence while a lock is held has lost the
// grant and its counters. It does not vote until it has waited the longest
// TTL and been re-seeded from a majority: nobody else is granted the key
// meanwhile, and the tokens handed out afterwards are higher than every
// earlier one. Marking it seeded by hand at once (a node without the
// marker discipline) lets a second client in while the first holds the
// lock, with a lower token: the guard is what holds.
func TestRestartWithoutPersistence(t *testing.T) {
	ctx := testCtx(t)
	const maxTTL = 5 * time.Second
	opts := driver.AcquireOptions{TTL: maxTTL}
	for _, bypass := range []bool{false, true} {
		t.Run(fmt.Sprintf("bypass=%v", bypass), func(t *testing.T) {
			srvs := startNodes(t, 3)
			toNode2 := faultproxy.Start(t, srvs[2].Addr)
			a := newBackend(t, []string{srvs[0].Addr, srvs[1].Addr, toNode2.Addr()}, redlock.WithMaxTTL(maxTTL), redlock.WithRequestTimeout(200*time.Millisecond))
			b := newBackend(t, addrs(srvs), redlock.WithMaxTTL(maxTTL))
			key := "restart/" + t.Name()
			counter := redlock.DefaultPrefix + redislock.HashTag(key) + ":token"
			cycle(t, ctx, a, key)
			for _, s := range srvs[:2] {
				if _, err := s.Do("SET", counter, "10"); err != nil {
					t.Fatal(err)
				}
			}
			// A is granted by nodes 0 and 1 (token 11): its requests to
			// node 2 are lost on the way.
			toNode2.Blackhole()
			held, err := a.Acquire(ctx, key, opts)
			if err != nil {
				t.Fatal(err)
			}
			if held.Token() != 11 {
				t.Fatalf("token %d, want 11", held.Token())
			}
			if keys := lockKeysOn(t, srvs[2]); len(keys) != 0 {
				t.Fatalf("node 2 holds %v, want nothing", keys)
			}
			toNode2.Reset() // the requests held back are lost, not delivered late
			toNode2.Heal()

			srvs[0].Kill()
			srvs[0].Restart(t) // empty, while A holds the lock
			if bypass {
				if _, err := srvs[0].Do("SET", redlock.DefaultPrefix+"node:seed", "ok"); err != nil {
					t.Fatal(err)
				}
			}
			l, err := b.Acquire(ctx, key, opts)
			if time.Since(held.Validity().Sent) > maxTTL/2 {
				t.Fatalf("the test took %v, too long for the grant to be surely valid", time.Since(held.Validity().Sent))
			}
			if bypass {
				if err != nil {
					t.Fatalf("with the guard bypassed, the second client was refused (%v): the test shows nothing", err)
				}
				t.Logf("guard bypassed: token %d granted while token %d is held", l.Token(), held.Token())
				if l.Token() >= held.Token() {
					t.Errorf("token %d >= %d: the lost counter did not show", l.Token(), held.Token())
				}
				return
			}
			if err == nil {
				t.Fatalf("granted token %d while token %d is held", l.Token(), held.Token())
			}
			if !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatalf("Acquire while held: %v", err)
			}
			// A's grant survives on node 1 only: its release says so.
			if err := held.Release(ctx); err != nil && !errors.Is(err, distlock.ErrLockLost) {
				t.Fatal(err)
			}
			// Node 0 still waits; nodes 1 and 2 grant, above every token.
			last := held.Token()
			tok := cycle(t, ctx, b, key)
			if tok <= last {
				t.Fatalf("token %d after %d", tok, last)
			}
			last = tok
			// Once its wait is over, node 0 is re-seeded and votes again:
			// with node 1 down it makes up the majority, and tokens still
			// increase.
			// Its wait is marked a few seconds after a round met it.
			eventually(t, 30*time.Second, "node 0 marked waiting", func() bool {
				m, _ := srvs[0].Do("GET", redlock.DefaultPrefix+"node:seed")
				s, _ := m.(string)
				return strings.HasPrefix(s, "p:")
			})
			time.Sleep(maxTTL + drift(maxTTL))
			cycle(t, ctx, b, key) // has node 0 re-seeded, in the background
			eventually(t, 10*time.Second, "node 0 re-seeded", func() bool {
				m, _ := srvs[0].Do("GET", redlock.DefaultPrefix+"node:seed")
				return m == "ok"
			})
			if m, _ := srvs[0].Do("GET", counter); m != "13" {
				t.Errorf("node 0's counter re-seeded to %v, want 13 (the highest of nodes 1 and 2, after the grant that found it due)", m)
			}
			srvs[1].Kill()
			tok = cycle(t, ctx, b, key)
			if tok <= last+1 {
				t.Fatalf("token %d from nodes 0 and 2 after %d", tok, last+1)
			}
		})
	}
}

// drift is the package's allowance for clock drift in a validity of d,
// plus a margin for this host's timers.
func drift(d time.Duration) time.Duration { return d/100 + 100*time.Millisecond }

// eventually polls cond until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Many clients on one key with small TTLs while nodes are killed and
// restarted (without persistence) underneath: every client is served, no
// two holders overlap, and tokens strictly increase in grant order.
//
// A holder's time is from its Acquire's return to its Release, or to the
// end of its validity if sooner: a goroutine the machine stalls past its
// lease holds nothing after it, and the next grant is then legal. So the
// holds are judged after the run, in token order: each begins after the
// one before ended.
func TestSplitVotesUnderFaults(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 5)
	const clients, rounds = 8, 30
	key := "split/" + t.Name()
	type hold struct {
		client     int
		token      uint64
		start, end time.Time
	}
	var (
		mu     sync.Mutex
		holds  []hold
		grants int
		errs   = make(chan error, 3*clients*rounds)
	)
	var wg sync.WaitGroup
	for c := range clients {
		b := newBackend(t, addrs(srvs), redlock.WithMaxTTL(500*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; {
				actx, cancel := context.WithTimeout(ctx, 30*time.Second)
				l, err := b.Acquire(actx, key, driver.AcquireOptions{TTL: 300 * time.Millisecond, Wait: true})
				cancel()
				if errors.Is(err, distlock.ErrUnavailable) {
					continue // a node died mid-round; the Client would retry
				}
				if err != nil {
					errs <- fmt.Errorf("client %d: %w", c, err)
					return
				}
				h := hold{client: c, token: l.Token(), start: time.Now()}
				time.Sleep(time.Millisecond)
				h.end = time.Now()
				if v := l.Validity(); v.Sent.Add(v.TTL).Before(h.end) {
					h.end = v.Sent.Add(v.TTL)
				}
				mu.Lock()
				holds = append(holds, h)
				grants++
				mu.Unlock()
				_ = l.Release(ctx)
				r++
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// Kill and restart one node at a time, without persistence; the next
	// one only once the last votes again (re-seeded), so that a majority
	// keeps its data.
	victims := []int{0, 3, 1, 4, 2}
	kills := 0
	for i := 0; ; i++ {
		select {
		case <-done:
		case <-time.After(200 * time.Millisecond):
			v := srvs[victims[i%len(victims)]]
			v.Kill()
			kills++
			select {
			case <-done:
			case <-time.After(100 * time.Millisecond):
			}
			v.Restart(t)
			deadline := time.Now().Add(30 * time.Second)
			for seeded := false; !seeded; {
				m, _ := v.Do("GET", redlock.DefaultPrefix+"node:seed")
				seeded = m == "ok"
				select {
				case <-done:
					seeded = true
				case <-time.After(20 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s was not re-seeded within 30s", v.Addr)
				}
			}
			continue
		}
		break
	}
	t.Logf("%d grants, %d nodes killed and restarted", grants, kills)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	slices.SortFunc(holds, func(a, b hold) int { return cmp.Compare(a.token, b.token) })
	for i := 1; i < len(holds); i++ {
		a, b := holds[i-1], holds[i]
		switch {
		case b.token == a.token:
			t.Errorf("token %d granted to clients %d and %d", a.token, a.client, b.client)
		case b.start.Before(a.end):
			t.Errorf("client %d held token %d from %v before client %d's hold of token %d ended",
				b.client, b.token, a.end.Sub(b.start), a.client, a.token)
		}
	}
	if grants != clients*rounds {
		t.Errorf("%d grants, want %d", grants, clients*rounds)
	}
}

// Lost replies between a client and one or two of three nodes: a try that
// got its majority elsewhere holds the lock on the silent nodes too (its
// release reaches them), a try that did not cleans up everywhere, nothing
// is left behind and nobody is granted what another holds.
func TestLostReplies(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3)
	proxies := make([]*faultproxy.Proxy, 3)
	paths := make([]string, 3)
	for i, s := range srvs {
		proxies[i] = faultproxy.Start(t, s.Addr)
		paths[i] = proxies[i].Addr()
	}
	var clients []*redis.Client
	var nodes []redlock.Node
	for _, p := range paths {
		c := newClient(t, p)
		clients, nodes = append(clients, c), append(nodes, c)
	}
	// Per-node timeouts far above a loaded machine's delays: a lost
	// reply costs a's caller its timeout, and the first cycles (which
	// dial, and load the scripts) must not time out.
	a := newBackendOf(t, nodes, redlock.WithRequestTimeout(time.Second))
	other := newBackend(t, addrs(srvs), redlock.WithRequestTimeout(5*time.Second))
	// settled waits until a's last cycle is over on every node: its
	// release returns once a majority released the key, and a request
	// still on its way to a node holds a connection, so that the next
	// request to that node would dial one (which a lost HELLO reply
	// stops). Once settled, each node has one connection, which the
	// checks below count on: a lost reply breaks it, and what follows
	// cannot reach the silent node.
	settled := func() {
		t.Helper()
		eventually(t, 5*time.Second, "the last cycle over on every node", func() bool {
			for i, c := range clients {
				if st := c.PoolStats(); st.TotalConns != st.IdleConns || len(lockKeysOn(t, srvs[i])) != 0 {
					return false
				}
			}
			return true
		})
	}
	opts := driver.AcquireOptions{TTL: 5 * time.Second}
	key := "lost/" + t.Name()
	cycle(t, ctx, other, key) // a new deployment: every node must answer to be marked seeded

	cycle(t, ctx, a, key) // connections through the proxies, and the scripts loaded
	settled()

	// One node's replies lost: granted by the other two.
	proxies[0].DropReplies()
	l, err := a.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatalf("Acquire with one node's replies lost: %v", err)
	}
	if keys := lockKeysOn(t, srvs[0]); len(keys) != 1 {
		t.Fatalf("the silent node holds %v, want the grant its reply was lost for", keys)
	}
	if o, err := other.Acquire(ctx, key, opts); err == nil {
		t.Fatalf("second grant (token %d) while token %d is held", o.Token(), l.Token())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// A new connection to the silent node cannot even start (its HELLO
	// reply is lost too): the release reaches it once the fault heals.
	proxies[0].Heal()
	noKeys := func(what string) {
		t.Helper()
		for _, s := range srvs {
			eventually(t, 5*time.Second, s.Addr+" keeps no lock key "+what, func() bool { return len(lockKeysOn(t, s)) == 0 })
		}
	}
	noKeys("after the release")
	cycle(t, ctx, a, key) // connections through the proxies again
	settled()

	// Two nodes' replies lost: not granted, and cleaned up on all three.
	proxies[0].DropReplies()
	proxies[1].DropReplies()
	if l, err := a.Acquire(ctx, key, opts); err == nil {
		t.Fatalf("granted token %d with the replies of two of three nodes lost", l.Token())
	} else if !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Acquire with two nodes' replies lost: %v, want ErrUnavailable", err)
	}
	if keys := lockKeysOn(t, srvs[0]); len(keys) == 0 {
		t.Fatalf("the silent node holds nothing: the requests did not reach it, the test shows nothing")
	}
	proxies[0].Heal()
	proxies[1].Heal()
	noKeys("after the failed Acquire")
	o, err := other.Acquire(ctx, key, opts)
	if err != nil {
		t.Fatalf("Acquire after the faults: %v", err)
	}
	if o.Token() <= l.Token() {
		t.Errorf("token %d after %d", o.Token(), l.Token())
	}
	_ = o.Release(ctx)
}
