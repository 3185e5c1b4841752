package zklock_test

import (
	"encoding/binary"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// ZooKeeper's opcodes that the pipelining tests look for.
const (
	opCreateRequest = 1
	opExists        = 3
	opSyncRequest   = 9
	opPing          = 11
	opGetChildren2  = 12
)

// waitForNext is how long orderProxy waits for a request behind a create
// before going on without one.
const waitForNext = 10 * time.Second

// orderProxy forwards one client's connections to a ZooKeeper server frame
// by frame. It holds the reply to each create, and to each sync, until the
// client has sent another request after it (or waitForNext passed), and
// records that request's opcode: what a client sends without waiting for
// the create's, or the sync's, reply. With swap set, it instead forwards each create request
// after the request that follows it (within waitForNext), as though the
// two had been sent the other way round.
type orderProxy struct {
	*wireProxy
	swap bool

	mu     sync.Mutex
	ops    []int32       // the opcodes of the requests forwarded, pings left out
	grew   chan struct{} // closed and replaced when ops grows
	behind []int32       // for each create reply, the opcode sent behind the create before it, or 0
	synced []int32       // the same for each sync reply
}

// held is a request whose reply orderProxy holds: its index in ops, and
// whether it is a sync (else a create).
type held struct {
	i    int
	sync bool
}

func startOrderProxy(t testing.TB, target string, swap bool) *orderProxy {
	t.Helper()
	p := &orderProxy{swap: swap, grew: make(chan struct{})}
	p.wireProxy = startWireProxy(t, target, func(c, s net.Conn) (up, down func()) {
		creates := &sync.Map{} // xid → held, for each create and sync
		return func() { p.requests(c, s, creates) }, func() { p.replies(s, c, creates) }
	})
	return p
}

// readFrames sends the frames read from c on the channel returned, which
// is closed when c is.
func readFrames(c net.Conn) <-chan []byte {
	out := make(chan []byte)
	go func() {
		defer close(out)
		for {
			var size [4]byte
			if _, err := io.ReadFull(c, size[:]); err != nil {
				return
			}
			frame := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
			copy(frame, size[:])
			if _, err := io.ReadFull(c, frame[4:]); err != nil {
				return
			}
			out <- frame
		}
	}()
	return out
}

// requests forwards the client's frames, noting each request's opcode.
func (p *orderProxy) requests(c, s net.Conn, creates *sync.Map) {
	frames := readFrames(c)
	defer func() {
		c.Close()
		for range frames {
		}
	}()
	forward := func(f []byte) bool {
		if len(f) >= 12 {
			xid, op := int32(binary.BigEndian.Uint32(f[4:])), int32(binary.BigEndian.Uint32(f[8:]))
			if op != opPing { // pings come on a timer
				p.mu.Lock()
				if op == opCreateRequest || op == opSyncRequest {
					creates.Store(xid, held{len(p.ops), op == opSyncRequest})
				}
				p.ops = append(p.ops, op)
				close(p.grew)
				p.grew = make(chan struct{})
				p.mu.Unlock()
			}
		}
		_, err := s.Write(f)
		return err == nil
	}
	first := true
	for f := range frames {
		if first || !p.swap || len(f) < 12 || int32(binary.BigEndian.Uint32(f[8:])) != opCreateRequest {
			first = false
			if !forward(f) {
				return
			}
			continue
		}
		// A ping is sent on a timer, not by the acquire: the create goes on
		// waiting for the request behind it.
		t := time.NewTimer(waitForNext)
	behind:
		for {
			select {
			case next, ok := <-frames:
				if ok && !forward(next) {
					t.Stop()
					return
				}
				if ok && len(next) >= 12 && int32(binary.BigEndian.Uint32(next[8:])) == opPing {
					continue
				}
			case <-t.C:
			}
			break behind
		}
		t.Stop()
		if !forward(f) {
			return
		}
	}
}

// replies forwards the server's frames, holding each create's reply until
// a request came behind the create (unless the proxy swaps requests).
func (p *orderProxy) replies(s, c net.Conn, creates *sync.Map) {
	frames := readFrames(s)
	defer func() {
		s.Close()
		for range frames {
		}
	}()
	first := true
	for f := range frames {
		if !first && !p.swap && len(f) >= 8 {
			if h, ok := creates.LoadAndDelete(int32(binary.BigEndian.Uint32(f[4:]))); ok {
				h := h.(held)
				op := p.after(h.i)
				p.mu.Lock()
				if h.sync {
					p.synced = append(p.synced, op)
				} else {
					p.behind = append(p.behind, op)
				}
				p.mu.Unlock()
			}
		}
		first = false
		if _, err := c.Write(f); err != nil {
			return
		}
	}
}

// after waits up to waitForNext for a request after the i-th, and returns
// its opcode, or 0.
func (p *orderProxy) after(i int) int32 {
	deadline := time.NewTimer(waitForNext)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		ops, grew := p.ops, p.grew
		p.mu.Unlock()
		if len(ops) > i+1 {
			return ops[i+1]
		}
		select {
		case <-grew:
		case <-deadline.C:
			return 0
		}
	}
}

// takeBehind returns what was recorded for the create replies since the
// last call.
func (p *orderProxy) takeBehind() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.behind
	p.behind = nil
	return b
}

// takeSynced returns what was recorded for the sync replies since the
// last call.
func (p *orderProxy) takeSynced() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.synced
	p.synced = nil
	return s
}

// A waiter woken by its predecessor's release sends its listing right
// behind the sync that confirms its grant through the leader, and a
// refresh the read of its node right behind its sync, before the sync's
// reply came: each takes one round trip, not two.
func TestReadSentBehindSync(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "pipeline/" + t.Name()
	makeLockPath(t, admin, key)
	p := startOrderProxy(t, z.Servers[0], false)
	b := newBackend(t, []string{p.addr()})
	l := handOff(t, ctx, z, b, key, func() {
		if got := p.takeSynced(); len(got) != 0 {
			t.Errorf("syncs before the hand-off, with %v behind them", got)
		}
	})
	if l == nil {
		return
	}
	defer l.Release(ctx)
	if got := p.takeSynced(); !slices.Equal(got, []int32{opGetChildren2}) {
		t.Errorf("the hand-off's syncs had %v sent behind them before their replies; want one with a getChildren2 (%d)", got, opGetChildren2)
	}
	if _, err := l.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if got := p.takeSynced(); !slices.Equal(got, []int32{opExists}) {
		t.Errorf("the refresh's syncs had %v sent behind them before their replies; want one with an exists (%d)", got, opExists)
	}
}

// An uncontended acquire sends its listing right behind its create,
// before the create's reply came: the two take one round trip.
func TestListingSentBehindCreate(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "pipeline/" + t.Name()
	makeLockPath(t, admin, key)
	p := startOrderProxy(t, z.Servers[0], false)
	b := newBackend(t, []string{p.addr()})
	for i := range 3 {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: i%2 == 0})
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		behind := p.takeBehind()
		if len(behind) != 1 || behind[0] != opGetChildren2 {
			t.Fatalf("cycle %d: the requests sent behind each create before its reply: %v; want one getChildren2 (%d)", i, behind, opGetChildren2)
		}
	}
}

// A listing that ran before the create (as one may on another connection
// than the create's) does not show our node; the acquire lists again
// rather than take the node for deleted.
func TestListingBeforeCreateListsAgain(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "pipeline/" + t.Name()
	makeLockPath(t, admin, key)
	p := startOrderProxy(t, z.Servers[0], true)
	b := newBackend(t, []string{p.addr()})
	for i := range 2 {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: i == 0})
		if err != nil {
			t.Fatalf("Acquire %d: %v", i, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if n := len(nodesOf(t, admin, key)); n != 0 {
		t.Errorf("%d nodes left under the lock", n)
	}
	// Each create went out behind the listing sent after it, and was
	// listed again after its reply.
	p.mu.Lock()
	ops := append([]int32(nil), p.ops...)
	p.mu.Unlock()
	creates := 0
	for i, op := range ops {
		if op != opCreateRequest {
			continue
		}
		creates++
		if i == 0 || ops[i-1] != opGetChildren2 {
			t.Errorf("requests %v: create %d not behind a listing", ops, creates)
		}
		if !slices.Contains(ops[i+1:], opGetChildren2) {
			t.Errorf("requests %v: no listing after create %d", ops, creates)
		}
	}
	if creates != 2 {
		t.Errorf("requests %v: %d creates, want 2", ops, creates)
	}
}
