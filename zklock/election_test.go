package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

// latchName is the name of a candidacy's node, as Curator's LeaderLatch
// names its participants' nodes.
var latchName = regexp.MustCompile(`^_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-latch-[0-9]{10}$`)

// newElection returns the election name over a Client of b whose terms
// have the TTL ttl.
func newElection(t testing.TB, b driver.Backend, name string, ttl time.Duration) *election.Election {
	t.Helper()
	el, err := election.New(newClient(t, b, distlock.WithTTL(ttl)), name)
	if err != nil {
		t.Fatal(err)
	}
	return el
}

// event returns the program's next event (a LeaderLatch listener's call),
// waiting for it at most d.
func (c *curator) event(t testing.TB, d time.Duration) string {
	t.Helper()
	select {
	case ev := <-c.events:
		return ev
	case <-time.After(d):
		t.Fatalf("the Java program told no event for %v; stderr:\n%s", d, c.stderr)
	}
	return ""
}

// noEvent checks that the program told no event so far.
func (c *curator) noEvent(t testing.TB, what string) {
	t.Helper()
	select {
	case ev := <-c.events:
		t.Fatalf("%s: the Java program's latch told %s", what, ev)
	default:
	}
}

// waitWatchedBy waits until the server z.Servers[0] holds a watch of the
// session on path.
func waitWatchedBy(t testing.TB, z *testserver.ZooKeeper, path string, session int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := testserver.FourLetterWord(z.Servers[0], "wchp")
		if err == nil && watchedBy(out, path, session) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %#x watches no %s: wchp %q (%v)", session, path, out, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// watchedBy reports whether wchp's output lists session under path: each
// watched path on a line of its own, then the sessions that watch it, one
// a line, indented by a tab.
func watchedBy(wchp, path string, session int64) bool {
	want := "0x" + strconv.FormatUint(uint64(session), 16)
	under := false
	for _, l := range strings.Split(wchp, "\n") {
		if s, ok := strings.CutPrefix(l, "\t"); ok {
			if under && s == want {
				return true
			}
			continue
		}
		under = l == path
	}
	return false
}

// candidacyNode checks the node of a distlock candidate: one
// LeaderLatch participant's node under the election's path, whose data is
// the candidate's value, whose czxid is the term and whose owner is the
// session of b.
func candidacyNode(t testing.TB, admin *zk.Conn, b *zklock.Backend, dir, node, value string, term uint64) {
	t.Helper()
	if !latchName.MatchString(node) {
		t.Fatalf("candidate's node %q, want _c_<uuid>-latch-<sequence>", node)
	}
	data, st, err := admin.Get(dir + "/" + node)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != value || uint64(st.Czxid) != term || st.EphemeralOwner != b.Conn().SessionID() {
		t.Errorf("candidate's node: data %q, czxid %d, owner %#x; want %q, the term %d, the session %#x", data, st.Czxid, st.EphemeralOwner, value, term, b.Conn().SessionID())
	}
}

// Apache Curator's LeaderLatch, in a JVM, and distlock's candidates take
// part in one election, on the election's path: one leads at a time, each
// waiting while the other leads; each sees the other as the leader with
// its participant id (LeaderLatch.getLeader reads distlock's proclaimed
// value; Leader and Observe read the Java participant's id, its term
// its node's czxid); terms increase across both.
func TestCuratorLeaderLatch(t *testing.T) {
	java, classpath := buildCurator(t)
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	b := newBackendTimeout(t, z.Servers, holdTimeout)
	el := newElection(t, b, "payments/leader", holdTimeout)
	key, dir := el.Key(), b.KeyPath(el.Key())

	// distlock leads; Java waits, and sees distlock's value.
	ta, err := el.Campaign(ctx, "10.0.0.7:8080")
	if err != nil {
		t.Fatal(err)
	}
	nodes := nodesOf(t, admin, key)
	if len(nodes) != 1 {
		t.Fatalf("nodes under %s: %q, want one", dir, nodes)
	}
	candidacyNode(t, admin, b, dir, nodes[0], "10.0.0.7:8080", ta.Token())
	// Proclaimed before Java waits: a LeaderLatch's watch of the node
	// before its own ends at a change of its data, and it sets no other
	// (see Elections in the package documentation).
	if err := ta.Proclaim(ctx, "10.0.0.7:9090"); err != nil {
		t.Fatal(err)
	}
	j := startJava(t, java, classpath, "CuratorLatch", z.ConnectString(), dir, "java-participant")
	j.do(t, "start", "started")
	nodes = waitNodes(t, admin, key, 2)
	// The latch watches the node before its own once it found itself
	// second: it has decided.
	waitWatchedBy(t, z, dir+"/"+nodes[0], j.session)
	j.noEvent(t, "while distlock leads")
	j.do(t, "has", "false")
	j.do(t, "leader", "leader 10.0.0.7:9090")

	// Java leads once distlock resigns; distlock sees it.
	javaNode := nodes[1]
	data, st, err := admin.Get(dir + "/" + javaNode)
	if err != nil {
		t.Fatal(err)
	}
	if !latchName.MatchString(javaNode) || string(data) != "java-participant" || st.EphemeralOwner != j.session {
		t.Fatalf("Java's node %q: data %q, owner %#x; want a participant's node with its id, owned by %#x", javaNode, data, st.EphemeralOwner, j.session)
	}
	javaTerm := uint64(st.Czxid)
	obs := el.Observe(ctx)
	if l := <-obs; l != (election.Leader{Value: "10.0.0.7:9090", Token: ta.Token()}) {
		t.Errorf("Observe sent %+v first, want distlock's term %d", l, ta.Token())
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := j.event(t, 30*time.Second); ev != "isLeader" {
		t.Fatalf("Java's latch told %s after distlock resigned, want isLeader", ev)
	}
	j.do(t, "has", "true")
	want := election.Leader{Value: "java-participant", Token: javaTerm}
	if l, err := el.Leader(ctx); err != nil || l != want {
		t.Errorf("Leader() = %+v, %v while Java leads; want %+v", l, err, want)
	}
	if l := nextLeader(t, obs); l != want {
		t.Errorf("Observe sent %+v, want %+v", l, want)
	}

	// Another distlock candidate waits while Java leads.
	ob := newBackendTimeout(t, z.Servers, holdTimeout)
	other := newElection(t, ob, "payments/leader", holdTimeout)
	type result struct {
		term *election.Term
		err  error
	}
	campaigned := make(chan result, 1)
	go func() {
		term, err := other.Campaign(ctx, "10.0.0.8:8080")
		campaigned <- result{term, err}
	}()
	nodes = waitNodes(t, admin, key, 2)
	if nodes[0] != javaNode {
		t.Fatalf("nodes %q, want Java's %q first", nodes, javaNode)
	}
	// The candidate watches Java's node once it found itself second: it
	// has decided, so a Campaign that ignores Java's node has returned.
	waitWatchedBy(t, z, dir+"/"+javaNode, ob.Conn().SessionID())
	select {
	case r := <-campaigned:
		t.Fatalf("Campaign returned while Java leads: %v, %v", r.term, r.err)
	default:
	}
	j.do(t, "leader", "leader java-participant")
	j.do(t, "close", "closed")
	r := <-campaigned
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.term.Token() <= javaTerm {
		t.Errorf("term %d after Java's %d", r.term.Token(), javaTerm)
	}
	candidacyNode(t, admin, ob, dir, nodes[1], "10.0.0.8:8080", r.term.Token())
	if l := nextLeader(t, obs); l != (election.Leader{Value: "10.0.0.8:8080", Token: r.term.Token()}) {
		t.Errorf("Observe sent %+v, want the term %d with the value 10.0.0.8:8080", l, r.term.Token())
	}
	if err := r.term.Resign(ctx); err != nil {
		t.Error(err)
	}
}

// nextLeader returns the next leader Observe sends, skipping no leader
// (between two terms), within 30s.
func nextLeader(t testing.TB, obs <-chan election.Leader) election.Leader {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-obs:
			if !ok {
				t.Fatal("Observe ended")
			}
			if l.Token != 0 {
				return l
			}
		case <-timeout:
			t.Fatal("Observe sent no leader within 30s")
		}
	}
}

// liveTerms checks, as terms begin, that no other term lives then and that
// tokens increase. A term counts as live while its Err is nil: Err is
// exact on the local clock, ahead of the context's cancellation, so two
// terms whose Err are both nil at one instant both live.
type liveTerms struct {
	mu   sync.Mutex
	live map[*election.Term]bool
	max  uint64
}

func (lt *liveTerms) begin(t *testing.T, term *election.Term) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.live == nil {
		lt.live = map[*election.Term]bool{}
	}
	for other := range lt.live {
		if other.Err() == nil && term.Err() == nil {
			t.Errorf("two live terms at once: %d began while %d lives", term.Token(), other.Token())
		}
	}
	if term.Token() <= lt.max {
		t.Errorf("term %d began after term %d", term.Token(), lt.max)
	}
	lt.max = max(lt.max, term.Token())
	lt.live[term] = true
}

func (lt *liveTerms) end(term *election.Term) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	delete(lt.live, term)
}

// Two quick reconnections of a leader never give two leaders
// (apache/curator#1024, #1160: LeaderLatch answered each reconnection by
// listing the participants again, and once by deleting and creating its
// node again, racing the listings of the previous answer). Round after
// round, the leader's connection is dropped twice in quick succession
// (the second drop as soon as the client has connected again) while the
// other candidates wait: the leader's session, its node and its term
// outlive the reconnections; at most one term lives at any instant, terms
// increase, and one fence.Register admits each live term's write, before
// and after the reconnections.
func TestQuickReconnectsGiveNoTwoLeaders(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	const candidates, rounds = 3, 6
	name := "reconnects/" + t.Name()
	reg := fence.NewRegister()
	var lt liveTerms
	type leading struct {
		i      int
		term   *election.Term
		resign chan struct{}
	}
	leaders := make(chan leading)
	proxies := make([]*faultproxy.Proxy, candidates)
	backends := make([]*zklock.Backend, candidates)
	var (
		wg   sync.WaitGroup
		lost atomic.Int64 // terms that ended before their Resign
	)
	for i := range candidates {
		proxies[i] = faultproxy.Start(t, z.Servers[0])
		backends[i] = newBackendTimeout(t, []string{proxies[i].Addr()}, conformanceSession)
		el := newElection(t, backends[i], name, conformanceSession)
		wg.Go(func() {
			for ctx.Err() == nil {
				term, err := el.Campaign(ctx, fmt.Sprintf("candidate %d", i))
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("candidate %d: Campaign: %v", i, err)
					}
					return
				}
				lt.begin(t, term)
				write(t, reg, term)
				resign := make(chan struct{})
				select {
				case leaders <- leading{i, term, resign}:
					select {
					case <-resign:
					case <-ctx.Done():
					}
				case <-ctx.Done():
				}
				write(t, reg, term)
				// A term whose renewals came too late ends before its
				// Resign, which reports the loss, as the term's context
				// does; any other error of Resign fails the test.
				err = term.Resign(context.WithoutCancel(ctx))
				switch cause := context.Cause(term.Context()); {
				case err == nil:
				case errors.Is(err, distlock.ErrLockLost) && errors.Is(cause, distlock.ErrLockLost):
					lost.Add(1)
				default:
					t.Errorf("candidate %d: Resign: %v (the term's context ended with %v)", i, err, cause)
				}
				lt.end(term)
			}
		})
	}
	defer wg.Wait()
	defer cancel()

	fastest := time.Hour // of the rounds' reconnections
	for round := range rounds {
		var l leading
		select {
		case l = <-leaders:
		case <-time.After(time.Minute):
			t.Fatalf("round %d: no leader within a minute", round)
		}
		p, b := proxies[l.i], backends[l.i]
		reset := time.Now()
		for range 2 {
			n := p.Conns()
			p.Reset()
			waitFor(t, "the leader's client to connect again", func() bool { return p.Conns() > n })
		}
		waitFor(t, "the leader's session back", func() bool { return b.Conn().State() == zk.StateHasSession })
		back := time.Since(reset)
		fastest = min(fastest, back)
		t.Logf("round %d: the leader's session back %v after the first reset", round, back)
		if err := l.term.Err(); err != nil && !errors.Is(err, distlock.ErrLockLost) {
			// Its renewals may come too late on a loaded machine: it
			// ends before another can be elected, as the checks show.
			t.Errorf("round %d: term %d ended with %v", round, l.term.Token(), err)
		}
		// The leader's node outlived the reconnections: another candidate
		// reads its term.
		h, held, err := backends[(l.i+1)%candidates].Holder(ctx, election.KeyPrefix+name)
		if l.term.Err() == nil && (err != nil || !held || h.Token != l.term.Token()) {
			t.Errorf("round %d: Holder = %+v, %v, %v while term %d lives", round, h, held, err, l.term.Token())
		}
		write(t, reg, l.term)
		close(l.resign)
	}
	cancel()
	wg.Wait()
	t.Logf("%d rounds, %d terms lost to the reconnections", rounds, lost.Load())
	// The Backend's host provider tries a lost server again at once (see
	// hosts); the zk client's own paused a second before each try, so
	// that no round took less than two.
	if fastest >= 500*time.Millisecond {
		t.Errorf("the fastest of %d rounds' reconnections took %v: the zk client paused before trying the server again", rounds, fastest)
	}
}

// write writes as the leader of term through reg: the write of a term that
// lives must be admitted.
func write(t *testing.T, reg *fence.Register, term *election.Term) {
	err := reg.Do("resource", term.Token(), func() error { return nil })
	if errors.Is(err, fence.ErrStaleToken) && term.Err() == nil {
		t.Errorf("the fence refused live term %d: %v", term.Token(), err)
	}
}

// waitFor waits until cond holds, at most 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A lock of an election's key and the election's candidacies exclude
// each other, both ways, through this package: their nodes share the
// election's path and are ordered together by sequence. A term's token
// is greater than the lock's before it, and a lock's than the term's.
func TestLocksAndCandidaciesExcludeEachOther(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	el := newElection(t, newBackend(t, z.Servers), "exclusion/leader", sessionTimeout)
	key := el.Key()
	locks := newClient(t, newBackend(t, z.Servers), distlock.WithTTL(sessionTimeout))

	lock, err := locks.Acquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		term *election.Term
		err  error
	}
	campaigned := make(chan result, 1)
	go func() {
		term, err := el.Campaign(ctx, "after the lock")
		campaigned <- result{term, err}
	}()
	nodes := waitNodes(t, admin, key, 2)
	if !nodeName.MatchString(nodes[0]) || !latchName.MatchString(nodes[1]) {
		t.Fatalf("nodes %q, want the lock's then a candidate's", nodes)
	}
	select {
	case r := <-campaigned:
		t.Fatalf("Campaign returned while the key is locked: %v, %v", r.term, r.err)
	default:
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-campaigned
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.term.Token() <= lock.Token() {
		t.Errorf("term %d after the lock's token %d", r.term.Token(), lock.Token())
	}

	if _, err := locks.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while a leader leads: %v, want ErrNotAcquired", err)
	}
	type locked struct {
		l   *distlock.Lock
		err error
	}
	granted := make(chan locked, 1)
	go func() {
		l, err := locks.Acquire(ctx, key)
		granted <- locked{l, err}
	}()
	waitNodes(t, admin, key, 2)
	select {
	case g := <-granted:
		t.Fatalf("Acquire returned while a leader leads: %v", g.err)
	default:
	}
	if err := r.term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-granted
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.l.Token() <= r.term.Token() {
		t.Errorf("lock's token %d after the term %d", g.l.Token(), r.term.Token())
	}
	if err := g.l.Release(ctx); err != nil {
		t.Error(err)
	}
}
