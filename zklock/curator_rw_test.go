package zklock_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/rwlock"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

// The names of the nodes of Curator's InterProcessReadWriteLock: a read
// lock's and a write lock's, this package's shared grants and writers
// alike.
var (
	readNodeName  = regexp.MustCompile(`^_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-__READ__[0-9]{10}$`)
	writeNodeName = regexp.MustCompile(`^_c_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-__WRIT__[0-9]{10}$`)
)

// lockResult is what an acquire of package rwlock returned.
type lockResult struct {
	l   *distlock.Lock
	err error
}

// Apache Curator's InterProcessReadWriteLock, in a JVM, and package rwlock
// share one read/write lock at the key's path: a Curator write lock
// excludes distlock's readers (a try fails, a reader waits, watching
// Curator's node, until Curator releases); a Curator read lock shares
// with distlock's readers and excludes distlock's writer, which waits
// behind both, while Curator's read lock times out behind distlock's
// writer. Readers lists Curator's readers with distlock's. A plain lock of
// the key (a "-lock-" node) waits for Curator's readers but is not seen
// by them, as the package documentation says.
func TestCuratorReadWriteInterop(t *testing.T) {
	java, classpath := buildCurator(t)
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "curator/catalog"
	dir := zklock.LockPath(zklock.DefaultPrefix, key)
	watched := make(chan string, 64)
	b := newBackendTimeout(t, z.Servers, holdTimeout)
	b.SetBeforeWatch(func(pred string) {
		select {
		case watched <- pred:
		default: // nobody waits for it: never block a waiter
		}
	})
	newRW := func(t *testing.T, b *zklock.Backend, owner string) *rwlock.RWLock {
		rw, err := rwlock.New(newClient(t, b, distlock.WithOwner(owner), distlock.WithTTL(holdTimeout)), key)
		if err != nil {
			t.Fatalf("rwlock.New: %v", err)
		}
		return rw
	}
	rw := newRW(t, b, "go-service")
	cur := startJava(t, java, classpath, "CuratorReadWrite", z.ConnectString(), dir)
	// curatorNode checks that node is Curator's, and of the name re.
	curatorNode := func(t *testing.T, node string, re *regexp.Regexp) *zk.Stat {
		t.Helper()
		_, st, err := admin.Get(dir + "/" + node)
		if err != nil || st.EphemeralOwner != cur.session || !re.MatchString(node) {
			t.Fatalf("node %s: %+v, %v; want Curator's (session %#x), named as %v", node, st, err, cur.session, re)
		}
		return st
	}
	// waitWatch waits until our waiter watches node.
	waitWatch := func(t *testing.T, node string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case p := <-watched:
				if p == dir+"/"+node {
					return
				}
			case <-timeout:
				t.Fatalf("no waiter watches %s after 30s", node)
			}
		}
	}
	start := func(acquire func() (*distlock.Lock, error)) <-chan lockResult {
		got := make(chan lockResult, 1)
		go func() {
			l, err := acquire()
			got <- lockResult{l, err}
		}()
		return got
	}
	notYet := func(t *testing.T, got <-chan lockResult, what string) {
		t.Helper()
		select {
		case r := <-got:
			t.Fatalf("%s returned (%v, %v) while it must wait", what, r.l, r.err)
		default:
		}
	}
	grantedIn := func(t *testing.T, got <-chan lockResult, what string) *distlock.Lock {
		t.Helper()
		select {
		case r := <-got:
			if r.err != nil {
				t.Fatalf("%s: %v", what, r.err)
			}
			return r.l
		case <-time.After(30 * time.Second):
			t.Fatalf("%s not granted after 30s", what)
		}
		return nil
	}

	t.Run("curator writer excludes our readers", func(t *testing.T) {
		cur.do(t, "write acquire", "held")
		nodes := waitNodes(t, admin, key, 1)
		st := curatorNode(t, nodes[0], writeNodeName)
		if l, err := rw.TryRLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
			if err == nil {
				l.Release(ctx)
			}
			t.Fatalf("TryRLock while Curator's write lock holds: %v, want ErrNotAcquired", err)
		}
		got := start(func() (*distlock.Lock, error) { return rw.RLock(ctx) })
		waitWatch(t, nodes[0])
		notYet(t, got, "RLock")
		// Curator's write lock is exclusive to us too: no holder but it.
		if hs, err := rw.Readers(ctx); err != nil || len(hs) != 0 {
			t.Fatalf("Readers while Curator's write lock holds: %+v, %v; want none", hs, err)
		}
		if h, held, err := rw.Writer(ctx); err != nil || !held || h.Token != uint64(st.Czxid) || h.Shared {
			t.Fatalf("Writer: %+v, %v, %v; want Curator's, token %d", h, held, err, st.Czxid)
		}
		cur.do(t, "write release", "released")
		r := grantedIn(t, got, "RLock once Curator's writer released")
		if r.Token() <= uint64(st.Czxid) {
			t.Errorf("reader's token %d after Curator's writer's %d", r.Token(), st.Czxid)
		}
		if ours := waitNodes(t, admin, key, 1); !readNodeName.MatchString(ours[0]) {
			t.Errorf("our reader's node %q, want _c_<uuid>-__READ__<sequence>", ours[0])
		}
		// And the reverse: Curator's writer times out behind our reader.
		cur.do(t, "write try 500", "timeout")
		mustReleaseLock(t, r)
		waitNodes(t, admin, key, 0)
	})

	t.Run("curator reader shares and excludes our writer", func(t *testing.T) {
		r, err := rw.RLock(ctx)
		if err != nil {
			t.Fatalf("RLock: %v", err)
		}
		cur.do(t, "read try 30000", "held")
		nodes := waitNodes(t, admin, key, 2)
		st := curatorNode(t, nodes[1], readNodeName)
		hs, err := rw.Readers(ctx)
		if err != nil || len(hs) != 2 || hs[0].Token != r.Token() || hs[1].Token != uint64(st.Czxid) || !hs[1].Shared {
			t.Fatalf("Readers: %+v, %v; want ours (token %d) and Curator's (token %d)", hs, err, r.Token(), st.Czxid)
		}
		mustReleaseLock(t, r)
		// Curator's reader alone holds: our writer's try fails, and its
		// acquire waits, watching Curator's node.
		if w, err := rw.TryLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
			if err == nil {
				w.Release(ctx)
			}
			t.Fatalf("TryLock while Curator's read lock holds: %v, want ErrNotAcquired", err)
		}
		got := start(func() (*distlock.Lock, error) { return rw.Lock(ctx) })
		waitWatch(t, nodes[1])
		notYet(t, got, "Lock")
		cur.do(t, "read release", "released")
		w := grantedIn(t, got, "Lock once Curator's reader released")
		if w.Token() <= uint64(st.Czxid) {
			t.Errorf("writer's token %d after Curator's reader's %d", w.Token(), st.Czxid)
		}
		if ours := waitNodes(t, admin, key, 1); !writeNodeName.MatchString(ours[0]) {
			t.Errorf("our writer's node %q, want _c_<uuid>-__WRIT__<sequence>", ours[0])
		}
		// Our writer holds: Curator's reader times out, and waits.
		cur.do(t, "read try 500", "timeout")
		cur.send(t, "read acquire")
		waitNodes(t, admin, key, 2)
		if line, ok := cur.said(); ok {
			t.Fatalf("Curator's reader said %q while our writer holds", line)
		}
		mustReleaseLock(t, w)
		if got := cur.next(t, 30*time.Second); got != "held" {
			t.Fatalf("Curator's reader once our writer released: %q, want held", got)
		}
		cur.do(t, "read release", "released")
		waitNodes(t, admin, key, 0)
	})

	// A plain lock of the key ("-lock-", as Curator's InterProcessMutex's)
	// waits for Curator's reader; Curator's reader does not see it.
	t.Run("plain lock and curator reader", func(t *testing.T) {
		locks := newClient(t, newBackendTimeout(t, z.Servers, holdTimeout), distlock.WithTTL(holdTimeout))
		cur.do(t, "read acquire", "held")
		if l, err := locks.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			if err == nil {
				l.Release(ctx)
			}
			t.Fatalf("TryAcquire while Curator's read lock holds: %v, want ErrNotAcquired", err)
		}
		cur.do(t, "read release", "released")
		l, err := locks.Acquire(ctx, key)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		nodes := waitNodes(t, admin, key, 1)
		if !nodeName.MatchString(nodes[0]) {
			t.Fatalf("the plain lock's node %q, want _c_<uuid>-lock-<sequence>", nodes[0])
		}
		cur.do(t, "read try 30000", "held")
		cur.do(t, "read release", "released")
		mustReleaseLock(t, l)
	})
}

// mustReleaseLock releases l.
func mustReleaseLock(t testing.TB, l *distlock.Lock) {
	t.Helper()
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A permit asked as a writer (AcquireOptions.Writer, which permits
// ignore) takes the semaphore's mutex with a "-lock-" node, which
// Curator's InterProcessSemaphoreV2 sees, not a "__WRIT__" node.
func TestPermitAskedAsWriterTakesMutexAsLock(t *testing.T) {
	z := testserver.StartZooKeeper(t)
	ctx := testCtx(t)
	key := "semaphore/writer"
	b := newBackend(t, z.Servers)
	granted := make(chan string, 4)
	b.SetBeforeGrant(func(node string) {
		select {
		case granted <- node:
		default:
		}
	})
	l, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute, Writer: true})
	if err != nil {
		t.Fatalf("AcquirePermit: %v", err)
	}
	defer l.Release(ctx)
	select {
	case node := <-granted:
		if dir := b.KeyPath(key) + "/locks/"; !strings.HasPrefix(node, dir) || !nodeName.MatchString(strings.TrimPrefix(node, dir)) {
			t.Errorf("the semaphore's mutex node %q, want %s_c_<uuid>-lock-<sequence>", node, dir)
		}
	default:
		t.Fatal("no mutex node granted")
	}
}
