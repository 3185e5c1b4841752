package bench

import (
	"context"
	"errors"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/zklock"
)

// zkSessionTimeout is the session timeout of every ZooKeeper subject:
// zklock's default, given to go-zookeeper too.
const zkSessionTimeout = zklock.DefaultSessionTimeout

// The ZooKeeper rows.
var (
	zkExistsSubject = Subject{
		ID: "zk-exists", Name: "ZooKeeper exists (one round trip)", Service: SvcZK, Kind: KindRoundTrip,
		Settings: "go-zookeeper v1.0.4, Conn.Exists of /, a read the server answers from memory", Measures: Latency,
		Open: func(e *Env) (Locker, error) {
			return zkRoundTrip(e, func(c *zk.Conn) error {
				_, _, err := c.Exists("/")
				return err
			})
		},
		Counters: zkCounters,
	}
	zkSetSubject = Subject{
		ID: "zk-set", Name: "ZooKeeper setData (one write, fsync)", Service: SvcZK, Kind: KindRoundTrip,
		Settings: "go-zookeeper v1.0.4, Conn.Set of one node: a transaction, written to the log and fsynced before the reply", Measures: Latency,
		Open: func(e *Env) (Locker, error) {
			return zkRoundTrip(e, func(c *zk.Conn) error {
				_, err := c.Set("/bench-rtt", []byte("x"), -1)
				if errors.Is(err, zk.ErrNoNode) {
					_, err = c.Create("/bench-rtt", []byte("x"), 0, zk.WorldACL(zk.PermAll))
					if errors.Is(err, zk.ErrNodeExists) {
						err = nil
					}
				}
				return err
			})
		},
		Counters: zkCounters,
	}
	zkFloorSubject = Subject{
		ID: "zk-floor", Name: "floor: create ephemeral + delete", Service: SvcZK, Kind: KindFloor,
		Settings: "two writes: create an ephemeral node at the key's path (it fails while another holds it: a lock that cannot wait), then delete it; " +
			"the two writes of every queue-recipe cycle (which creates a sequential node and lists its siblings), no token beyond the node's zxid; cannot wait",
		Measures: Latency | Throughput,
		Open:     openZKFloor,
		Counters: zkCounters,
	}
	zkLockSubject = Subject{
		ID: "zk-lock", Name: "go-zookeeper zk.Lock", Service: SvcZK, Kind: KindPeer,
		Settings: "go-zookeeper v1.0.4, one Conn per instance (session timeout 10s); a new zk.NewLock per acquire, Lock and Unlock (protected ephemeral sequential node, children list, a data watch on the predecessor); Lock takes no context",
		Measures: Latency | Throughput | Contention,
		Open:     openZKLock,
		Counters: zkCounters,
	}
	distlockZKSubject = Subject{
		ID: "distlock-zk", Name: "distlock ZooKeeper (Client.Acquire)", Service: SvcZK, Kind: KindDistlock,
		Settings: "zklock defaults: one session per Backend (timeout 10s), Curator's node layout, a waiter watches its predecessor; fencing token = the node's czxid; connection state watched",
		Measures: Latency | Throughput | Contention | Election | Semaphore,
		Open:     openDistlockZK,
		Counters: zkCounters,
	}
)

func zkCounters(ctx context.Context, e *Env) (Snapshot, error) { return e.ZooKeeperSnapshot(ctx) }

// zkQuiet drops go-zookeeper's log lines (one per connection).
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// zkConnect opens a session of its own, as a process would.
func zkConnect(e *Env) (*zk.Conn, error) {
	c, _, err := zk.Connect(e.ZooKeeper(), zkSessionTimeout, zk.WithLogger(zkQuiet{}), zk.WithLogInfo(false))
	return c, err
}

func zkRoundTrip(e *Env, op func(*zk.Conn) error) (Locker, error) {
	c, err := zkConnect(e)
	if err != nil {
		return nil, err
	}
	return funcLocker{lock: func(context.Context, string) (Unlock, error) {
		return noUnlock, op(c)
	}, close: func() error { c.Close(); return nil }}, nil
}

func openZKLock(e *Env) (Locker, error) {
	c, err := zkConnect(e)
	if err != nil {
		return nil, err
	}
	acl := zk.WorldACL(zk.PermAll)
	return funcLocker{lock: func(_ context.Context, key string) (Unlock, error) {
		l := zk.NewLock(c, "/bench-zk/"+key, acl)
		if err := l.Lock(); err != nil {
			return nil, err
		}
		return func(context.Context) error { return l.Unlock() }, nil
	}, close: func() error { c.Close(); return nil }}, nil
}

func openZKFloor(e *Env) (Locker, error) {
	c, err := zkConnect(e)
	if err != nil {
		return nil, err
	}
	acl := zk.WorldACL(zk.PermAll)
	return funcLocker{lock: func(_ context.Context, key string) (Unlock, error) {
		p := "/bench-floor/" + key
		_, err := c.Create(p, nil, zk.FlagEphemeral, acl)
		if errors.Is(err, zk.ErrNoNode) { // first use of the key: its parents
			if err = zkParents(c, p, acl); err == nil {
				_, err = c.Create(p, nil, zk.FlagEphemeral, acl)
			}
		}
		if errors.Is(err, zk.ErrNodeExists) {
			return nil, errHeld
		}
		if err != nil {
			return nil, err
		}
		// The node is this session's while the session lives: nobody
		// else can have created it again.
		return func(context.Context) error { return c.Delete(p, -1) }, nil
	}, close: func() error { c.Close(); return nil }}, nil
}

// zkParents creates the persistent parents of p.
func zkParents(c *zk.Conn, p string, acl []zk.ACL) error {
	parts := strings.Split(p, "/")
	dir := ""
	for _, part := range parts[1 : len(parts)-1] {
		dir += "/" + part
		if _, err := c.Create(dir, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

func openDistlockZK(e *Env) (Locker, error) {
	b, err := zklock.New(e.ZooKeeper())
	if err != nil {
		return nil, err
	}
	return newDistlockLocker(b, false, b.Close)
}
