package zklock_test

import (
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

// createPath returns the path of a create request, the frame f (its
// length first), or "" if f is no create.
func createPath(f []byte) string {
	if len(f) < 16 || int32(binary.BigEndian.Uint32(f[8:])) != opCreateRequest {
		return ""
	}
	n := int(binary.BigEndian.Uint32(f[12:]))
	if n < 0 || len(f) < 16+n {
		return ""
	}
	return string(f[16 : 16+n])
}

// leaseProxy forwards a client's connections to a ZooKeeper server frame
// by frame, and does one thing to the first create of a node under
// leases (a lease node) that it sees: with hold zero, it forwards the
// creates and drops the reply of the first that succeeds, cutting the
// connection (the create was applied, and its reply lost); otherwise it
// holds the first create, and what the client sends after it, for hold
// before forwarding them (the client's request timeout passes before the
// create runs).
type leaseProxy struct {
	*wireProxy
	leases string
	hold   time.Duration
	done   atomic.Bool // the reply was dropped, or the create held and forwarded
}

func startLeaseProxy(t testing.TB, target, leases string, hold time.Duration) *leaseProxy {
	t.Helper()
	p := &leaseProxy{leases: leases, hold: hold}
	p.wireProxy = startWireProxy(t, target, func(c, s net.Conn) (up, down func()) {
		var drop sync.Map // xid of the create whose reply is dropped
		return func() { p.requests(c, s, &drop) }, func() { p.replies(s, c, &drop) }
	})
	return p
}

func (p *leaseProxy) requests(c, s net.Conn, drop *sync.Map) {
	frames := readFrames(c)
	defer func() {
		c.Close()
		for range frames {
		}
	}()
	for f := range frames {
		if strings.HasPrefix(createPath(f), p.leases+"/") && !p.done.Load() {
			if p.hold == 0 {
				drop.Store(int32(binary.BigEndian.Uint32(f[4:])), true)
			} else {
				time.Sleep(p.hold) // what the client sends meanwhile waits in frames
				p.done.Store(true)
			}
		}
		if _, err := s.Write(f); err != nil {
			return
		}
	}
}

func (p *leaseProxy) replies(s, c net.Conn, drop *sync.Map) {
	frames := readFrames(s)
	defer func() {
		s.Close()
		for range frames {
		}
	}()
	for f := range frames {
		if len(f) >= 20 {
			if _, ok := drop.LoadAndDelete(int32(binary.BigEndian.Uint32(f[4:]))); ok && binary.BigEndian.Uint32(f[16:]) == 0 && p.done.CompareAndSwap(false, true) {
				c.Close() // the reply is lost with the connection
				return
			}
		}
		if _, err := c.Write(f); err != nil {
			return
		}
	}
}

// A lease node's create whose reply was lost may be applied where the
// claim's listing does not show it (a follower not yet up to date): its
// node, with our protected name, would count against the limit, a permit
// held by nobody, until our release or the session's end. The grant
// deletes it before it gives the mutex back. The late node is made here,
// through the Backend's own connection (so in its session), between the
// claim and the grant, as such a create would be applied.
func TestPermitLostReplyLateLeaseDeleted(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "sem/" + t.Name()
	dir := zklock.LockPath(zklock.DefaultPrefix, key)
	uuid, err := zklock.NewUUID()
	if err != nil {
		t.Fatal(err)
	}
	p := startLeaseProxy(t, z.Servers[0], dir+"/leases", 0)
	b := newBackendTimeout(t, []string{p.addr()}, 20*time.Second)
	b.SetUUID(func() (string, error) { return uuid, nil })
	var late atomic.Value
	b.SetBeforeGrant(func(n string) {
		if !strings.HasPrefix(n, dir+"/leases/") || !p.done.Load() || late.Load() != nil {
			return
		}
		l, err := b.Conn().Create(dir+"/leases/"+zklock.NodePrefix(uuid, "lease-"), []byte("late"), zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			t.Errorf("create the late lease node: %v", err)
			return
		}
		late.Store(l)
	})
	if _, err := b.Permits(ctx, key); err != nil { // the session is up
		t.Fatalf("Permits: %v", err)
	}
	sid := b.Conn().SessionID()
	l, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 2}, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	if !p.done.Load() || late.Load() == nil {
		t.Fatalf("the create's reply was not lost (dropped %v, late node %v)", p.done.Load(), late.Load())
	}
	if got := b.Conn().SessionID(); got != sid {
		t.Fatalf("the session changed (%#x to %#x): the test did not keep it", sid, got)
	}
	path := l.(interface{ Path() string }).Path()
	if leases := leasesOf(t, admin, key); len(leases) != 1 || dir+"/leases/"+leases[0] != path {
		t.Fatalf("leases %q once granted, want only %s (the late node %v counts against the limit)", leases, path, late.Load())
	}
	// The second permit of the limit is there for another asker.
	other, err := newBackend(t, z.Servers).AcquirePermit(ctx, key, driver.Semaphore{Limit: 2}, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("the other permit of limit 2: %v", err)
	}
	for _, l := range []driver.Lease{l, other} {
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if leases := leasesOf(t, admin, key); len(leases) != 0 {
		t.Fatalf("leases %q after the releases, want none", leases)
	}
}

// A waiting acquire whose lease create is not answered within the request
// timeout goes on waiting while the mutex's session lives, and tries
// again after a pause, as it does when a count fails; the create answered
// late is deleted. Only one permit is left, the one granted.
func TestPermitCreateTimeoutRetried(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "sem/" + t.Name()
	dir := zklock.LockPath(zklock.DefaultPrefix, key)
	const requestTimeout = time.Second
	p := startLeaseProxy(t, z.Servers[0], dir+"/leases", 3*requestTimeout)
	b := newBackendTimeout(t, []string{p.addr()}, 20*time.Second, zklock.WithRequestTimeout(requestTimeout))
	l, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 2}, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	if err != nil {
		t.Fatalf("AcquirePermit with its first create unanswered in time: %v, want a permit", err)
	}
	if !p.done.Load() {
		t.Fatal("the create was not held past the request timeout")
	}
	path := l.(interface{ Path() string }).Path()
	deadline := time.Now().Add(30 * time.Second)
	for {
		leases := leasesOf(t, admin, key)
		if len(leases) == 1 && dir+"/leases/"+leases[0] == path {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leases %q 30s after the grant, want only %s", leases, path)
		}
		time.Sleep(5 * time.Millisecond) // polls a condition, with a deadline
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// A try, which has no wait to go on with, still reports the failure.
	p2 := startLeaseProxy(t, z.Servers[0], dir+"/leases", 3*requestTimeout)
	b2 := newBackendTimeout(t, []string{p2.addr()}, 20*time.Second, zklock.WithRequestTimeout(requestTimeout))
	if l, err := b2.AcquirePermit(ctx, key, driver.Semaphore{Limit: 2}, driver.AcquireOptions{TTL: time.Minute}); !errors.Is(err, distlock.ErrUnavailable) {
		if err == nil {
			l.Release(ctx)
		}
		t.Fatalf("a try with its create unanswered in time: %v, want ErrUnavailable", err)
	}
}
