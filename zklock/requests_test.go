package zklock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

// ZooKeeper's opcodes of the requests a lock cycle may send.
var opNames = map[int32]string{
	1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData",
	8: "getChildren", 9: "sync", 11: "ping", 12: "getChildren2", 14: "multi",
	19: "createContainer", 100: "auth", 101: "setWatches",
}

// countingProxy forwards connections to a ZooKeeper server and counts the
// requests that clients send through it, by opcode, from their frames on
// the wire (a count of what the server is asked, independent of the
// client).
type countingProxy struct {
	*wireProxy

	mu     sync.Mutex
	counts map[int32]int
}

func startCountingProxy(t testing.TB, target string) *countingProxy {
	t.Helper()
	p := &countingProxy{counts: map[int32]int{}}
	p.wireProxy = startWireProxy(t, target, func(c, s net.Conn) (up, down func()) {
		return func() { p.count(c, s) }, func() { io.Copy(c, s) }
	})
	return p
}

// count forwards the frames from client to server, counting the opcodes
// of all but the first (the connect request, which has no header).
func (p *countingProxy) count(c, s net.Conn) {
	var size [4]byte
	for first := true; ; first = false {
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		if !first && len(body) >= 8 {
			p.mu.Lock()
			p.counts[int32(binary.BigEndian.Uint32(body[4:]))]++
			p.mu.Unlock()
		}
		if _, err := s.Write(append(size[:], body...)); err != nil {
			return
		}
	}
}

// take returns the requests counted since the last take, pings left out
// (the zk client sends them on a timer).
func (p *countingProxy) take() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for op, n := range p.counts {
		if op == 11 {
			continue
		}
		name := opNames[op]
		if name == "" {
			name = fmt.Sprint(op)
		}
		out[name] += n
	}
	clear(p.counts)
	return out
}

func showCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// makeLockPath creates key's lock path as persistent nodes, so that the
// ensemble never reaps it between cycles (a reaped path costs an acquire
// its parents' creates, which this count is not about).
func makeLockPath(t testing.TB, admin *zk.Conn, key string) {
	t.Helper()
	dir := zklock.LockPath(zklock.DefaultPrefix, key)
	parts := strings.Split(dir[1:], "/")
	for i := range parts {
		p := "/" + strings.Join(parts[:i+1], "/")
		if _, err := admin.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatalf("create %s: %v", p, err)
		}
	}
}

// handOff has b wait for key while a holder on another connection holds
// it, calls watching once b watches the holder's node, then releases the
// holder, and returns b's lease: nil, the failure reported, if b was not
// granted.
func handOff(t *testing.T, ctx context.Context, z *testserver.ZooKeeper, b driver.Backend, key string, watching func()) driver.Lease {
	t.Helper()
	holder, err := newBackend(t, z.Servers).Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("holder Acquire: %v", err)
	}
	granted := make(chan driver.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Errorf("waiter Acquire: %v", err)
		}
		granted <- l
	}()
	waitWatches(t, z, 1)
	watching()
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("holder Release: %v", err)
	}
	return <-granted
}

// An uncontended acquire and release ask the server three things: the
// create of our node (whose reply gives its czxid, the token, and shows
// it in the current session, and confirms the session through the
// leader), one listing (which shows it first) and the delete; a hand-off
// costs the waiter a listing, a watch, a listing that shows its node
// first, and a sync that confirms its session through the leader.
// Counted on the wire, so that a read added to the grant or the hold
// shows here.
func TestRequestsPerCycle(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "requests/" + t.Name()
	makeLockPath(t, admin, key)
	p := startCountingProxy(t, z.Servers[0])
	b := newBackend(t, []string{p.addr()})
	cycle := func(wait bool) driver.Lease {
		t.Helper()
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: wait})
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		return l
	}
	// The session, and its authentication and watches, before counting.
	if err := cycle(true).Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.take()

	const cycles = 20
	for i := range cycles {
		l := cycle(i%2 == 0) // a blocking acquire and a try cost the same
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	got := p.take()
	want := map[string]int{"create": cycles, "getChildren2": cycles, "delete": cycles}
	if !maps.Equal(got, want) {
		t.Errorf("%d uncontended cycles sent %s; want %s (3 a cycle)", cycles, showCounts(got), showCounts(want))
	}

	// A hand-off: the waiter (through the proxy) lists, watches the
	// holder's node, is woken by its release, lists again and is granted.
	l := handOff(t, ctx, z, b, key, func() {})
	if l == nil {
		return
	}
	got = p.take()
	// A refresh: a sync that confirms the session through the leader,
	// and the read of the node.
	if _, err := l.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("waiter Refresh: %v", err)
	}
	if refresh, want := p.take(), map[string]int{"sync": 1, "exists": 1}; !maps.Equal(refresh, want) {
		t.Errorf("a refresh sent %s; want %s", showCounts(refresh), showCounts(want))
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("waiter Release: %v", err)
	}
	for op, n := range p.take() {
		got[op] += n
	}
	want = map[string]int{"create": 1, "getChildren2": 2, "getData": 1, "sync": 1, "delete": 1}
	if !maps.Equal(got, want) {
		t.Errorf("a hand-off sent %s from the waiter; want %s", showCounts(got), showCounts(want))
	}
}

// The token read from the create's reply is the node's czxid, with other
// sessions writing to the ensemble meanwhile (their transactions take the
// zxids around ours).
func TestTokenIsCzxidUnderWrites(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	writer := adminConn(t, z.Servers)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Bounded: it ends with the test, or after 100,000 writes.
		for i := 0; i < 100000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			p, err := writer.Create("/writes-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
			if err != nil {
				return
			}
			writer.Delete(p, -1)
		}
	}()
	defer wg.Wait()
	defer close(stop)
	b := newBackend(t, z.Servers)
	for i := range 40 {
		key := fmt.Sprintf("token/%d", i%4)
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		path := l.(interface{ Path() string }).Path()
		_, st, err := admin.Exists(path)
		if err != nil {
			t.Fatalf("exists %s: %v", path, err)
		}
		if uint64(st.Czxid) != l.Token() || st.EphemeralOwner != b.Conn().SessionID() {
			t.Errorf("node %s: czxid %d, owner %#x; the lease's token %d, session %#x", path, st.Czxid, st.EphemeralOwner, l.Token(), b.Conn().SessionID())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
}

// A shared grant costs what a lock does: the create, one listing and the
// delete, with another reader holding (readers do not wait for readers);
// so does a writer (AcquireOptions.Writer) of a free key.
func TestSharedRequestsPerCycle(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "requests/" + t.Name()
	makeLockPath(t, admin, key)
	p := startCountingProxy(t, z.Servers[0])
	b := newBackend(t, []string{p.addr()})
	// The session, and its authentication and watches, before counting.
	l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.take()

	other, err := newBackend(t, z.Servers).AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("another reader's AcquireShared: %v", err)
	}
	const cycles = 10
	for i := range cycles {
		l, err := b.AcquireShared(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: i%2 == 0})
		if err != nil {
			t.Fatalf("AcquireShared beside another reader: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	got := p.take()
	want := map[string]int{"create": cycles, "getChildren2": cycles, "delete": cycles}
	if !maps.Equal(got, want) {
		t.Errorf("%d shared cycles beside a reader sent %s; want %s (3 a cycle)", cycles, showCounts(got), showCounts(want))
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}

	for range cycles {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true, Writer: true})
		if err != nil {
			t.Fatalf("Acquire as a writer: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	got = p.take()
	if !maps.Equal(got, want) {
		t.Errorf("%d writer cycles sent %s; want %s (3 a cycle)", cycles, showCounts(got), showCounts(want))
	}
}
