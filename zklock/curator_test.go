package zklock_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
	"github.com/distlock/distlock/zklock"
)

// holdTimeout is the session timeout (5/12 of it the TTL) of the locks that tests
// hold while other processes start and run: long, so that a busy machine
// does not end them.
const holdTimeout = 15 * time.Second

// curatorJars are the class path of the Java programs of testdata
// (CuratorMutex, CuratorLatch) as Debian's
// packages install it (libcurator-recipes-java, libcurator-framework-java,
// libzookeeper-java and their dependencies).
var curatorJars = []string{
	"/usr/share/java/curator-recipes.jar",
	"/usr/share/java/curator-framework.jar",
	"/usr/share/java/curator-client.jar",
	"/usr/share/java/zookeeper.jar",
	"/usr/share/java/zookeeper-jute.jar",
	"/usr/share/java/guava.jar",
	"/usr/share/java/slf4j-api.jar",
	"/usr/share/java/slf4j-nop.jar",
}

// buildCurator compiles the Java programs of testdata and returns the
// java binary and the class path to run them with.
func buildCurator(t testing.TB) (java, classpath string) {
	t.Helper()
	javac := testserver.Require(t, "javac")
	java = testserver.Require(t, "java")
	for _, j := range curatorJars {
		if !fileExists(j) {
			testserver.Missing(t, j)
		}
	}
	jars := strings.Join(curatorJars, ":")
	dir := t.TempDir()
	sources, err := filepath.Glob(filepath.Join("testdata", "*.java"))
	if err != nil || len(sources) == 0 {
		t.Fatalf("the Java programs of testdata: %q, %v", sources, err)
	}
	out, err := exec.Command(javac, append([]string{"-cp", jars, "-d", dir}, sources...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("javac %s: %v\n%s", strings.Join(sources, " "), err, out)
	}
	return java, dir + ":" + jars
}

// curator is a running Java program of testdata: a JVM holding, or
// waiting for, Curator's InterProcessMutex on one path (CuratorMutex), or
// taking part in an election with Curator's LeaderLatch (CuratorLatch).
type curator struct {
	stdin   io.WriteCloser
	lines   chan string // its stdout but for events, closed when it exits
	events  chan string // the lines that start with "event ", without it
	session int64       // its ZooKeeper session
	stderr  *lockedBuffer
}

// startCurator starts CuratorMutex on the lock path path of the ensemble at
// connect and waits until it has a session (see startJava).
func startCurator(t testing.TB, java, classpath, connect, path string) *curator {
	t.Helper()
	return startJava(t, java, classpath, "CuratorMutex", connect, path)
}

// startJava starts the Java program main of testdata with args and waits
// until it has a session. It is stopped when the test ends: the end of its
// stdin closes its session, and a process still there 30s later is
// killed.
func startJava(t testing.TB, java, classpath, main string, args ...string) *curator {
	t.Helper()
	cmd := exec.Command(java, append([]string{"-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", classpath, main}, args...)...)
	c := &curator{lines: make(chan string, 16), events: make(chan string, 16), stderr: &lockedBuffer{}}
	cmd.Stderr = c.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", main, err)
	}
	// Once the test is over nobody reads events, and Cleanup reads lines
	// only to see the program exit: the reader drops what it cannot hand
	// over then, so that it never blocks and c.lines is closed.
	over := make(chan struct{})
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			to, l := c.lines, sc.Text()
			if ev, ok := strings.CutPrefix(l, "event "); ok {
				to, l = c.events, ev
			}
			select {
			case to <- l:
			case <-over:
			}
		}
	}()
	t.Cleanup(func() {
		close(over)
		stdin.Close()
		timer := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
		for range c.lines {
		}
		timer.Stop()
		cmd.Wait()
	})
	ready := c.next(t, time.Minute)
	hex, ok := strings.CutPrefix(ready, "ready ")
	if !ok {
		t.Fatalf("%s said %q, want ready SESSION", main, ready)
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		t.Fatalf("%s's session %q: %v", main, hex, err)
	}
	c.session = int64(id)
	return c
}

// next returns the program's next line, waiting for it at most d.
func (c *curator) next(t testing.TB, d time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatalf("the Java program exited; stderr:\n%s", c.stderr)
		}
		return l
	case <-time.After(d):
		t.Fatalf("the Java program said nothing for %v; stderr:\n%s", d, c.stderr)
	}
	return ""
}

// do sends cmd to the program and checks its answer.
func (c *curator) do(t testing.TB, cmd, want string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		t.Fatalf("Java %s: %v", cmd, err)
	}
	if got := c.next(t, time.Minute); got != want {
		t.Fatalf("Java %s: %q, want %q", cmd, got, want)
	}
}

// send sends cmd to the program without waiting for its answer.
func (c *curator) send(t testing.TB, cmd string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, cmd+"\n"); err != nil {
		t.Fatalf("Java %s: %v", cmd, err)
	}
}

// said returns a line the program has said and not yet been read, if any.
func (c *curator) said() (string, bool) {
	select {
	case l, ok := <-c.lines:
		return l, ok
	default:
		return "", false
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Apache Curator's InterProcessMutex, in a JVM, and distlock exclude each
// other on the same path, both ways: while Curator holds, distlock's try
// fails and its acquire waits until Curator releases; while distlock holds,
// Curator's timed acquire times out and its acquire waits until distlock
// releases; in a queue of both, each release wakes the next in line.
// Curator's nodes have the same form as ours, and List reports Curator's
// holder.
func TestCuratorInterop(t *testing.T) {
	java, classpath := buildCurator(t)
	z := testserver.StartZooKeeper(t)
	admin := adminConn(t, z.Servers)
	ctx := testCtx(t)
	key := "curator/orders"
	dir := zklock.LockPath(zklock.DefaultPrefix, key)
	b := newBackendTimeout(t, z.Servers, holdTimeout)
	locks := newClient(t, b, distlock.WithOwner("go-service"), distlock.WithTTL(holdTimeout))
	cur := startCurator(t, java, classpath, z.ConnectString(), dir)

	// checkHolder checks that List (which `distlock status` prints)
	// reports the holder of node.
	checkHolder := func(t *testing.T, node string) {
		t.Helper()
		data, st, err := admin.Get(dir + "/" + node)
		if err != nil {
			t.Fatalf("get %s: %v", node, err)
		}
		holders, err := b.List(ctx, "curator/")
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		want := driver.Holder{Key: key, Token: uint64(st.Czxid), Owner: string(data)}
		if len(holders) != 1 || holders[0].Key != want.Key || holders[0].Token != want.Token || holders[0].Owner != want.Owner {
			t.Errorf("List: %+v, want %+v", holders, want)
		}
	}

	var curatorToken uint64
	t.Run("curator holds", func(t *testing.T) {
		cur.do(t, "acquire", "held")
		nodes := nodesOf(t, admin, key)
		if len(nodes) != 1 || !nodeName.MatchString(nodes[0]) {
			t.Fatalf("Curator's nodes: %q, want one _c_<uuid>-lock-<sequence>", nodes)
		}
		_, st, err := admin.Get(dir + "/" + nodes[0])
		if err != nil || st.EphemeralOwner != cur.session {
			t.Fatalf("Curator's node %s: %+v, %v; want owned by its session %#x", nodes[0], st, err, cur.session)
		}
		curatorToken = uint64(st.Czxid)
		checkHolder(t, nodes[0])
		if _, err := locks.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryAcquire while Curator holds: %v, want ErrNotAcquired", err)
		}
		type result struct {
			l   *distlock.Lock
			err error
		}
		granted := make(chan result, 1)
		go func() {
			l, err := locks.Acquire(ctx, key)
			granted <- result{l, err}
		}()
		waitNodes(t, admin, key, 2)
		select {
		case r := <-granted:
			t.Fatalf("Acquire returned (%v) while Curator holds", r.err)
		default:
		}
		cur.do(t, "release", "released")
		var r result
		select {
		case r = <-granted:
		case <-time.After(30 * time.Second):
			t.Fatal("Acquire not granted 30s after Curator released")
		}
		if r.err != nil {
			t.Fatalf("Acquire after Curator released: %v", r.err)
		}
		if r.l.Token() <= curatorToken {
			t.Errorf("token %d after Curator's %d", r.l.Token(), curatorToken)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	})

	t.Run("distlock holds", func(t *testing.T) {
		l, err := locks.Acquire(ctx, key)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		ours := waitNodes(t, admin, key, 1)[0]
		checkHolder(t, ours)
		cur.do(t, "try 500", "timeout")
		if nodes := waitNodes(t, admin, key, 1); nodes[0] != ours {
			t.Fatalf("nodes after Curator's timed out acquire: %q, want only %q", nodes, ours)
		}
		cur.send(t, "acquire")
		nodes := waitNodes(t, admin, key, 2)
		if nodes[0] != ours || !nodeName.MatchString(nodes[1]) {
			t.Fatalf("nodes while Curator waits: %q, want %q then Curator's", nodes, ours)
		}
		if line, ok := cur.said(); ok {
			t.Fatalf("CuratorMutex said %q while distlock holds", line)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if got := cur.next(t, 30*time.Second); got != "held" {
			t.Fatalf("Curator's acquire after distlock released: %q, want held", got)
		}
		checkHolder(t, nodes[1])
		_, st, err := admin.Get(dir + "/" + nodes[1])
		if err != nil || uint64(st.Czxid) <= l.Token() || st.EphemeralOwner != cur.session {
			t.Errorf("Curator's node %s: %+v, %v; want owned by %#x, created after token %d", nodes[1], st, err, cur.session, l.Token())
		}
		if _, err := locks.TryAcquire(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("TryAcquire while Curator holds: %v, want ErrNotAcquired", err)
		}
		cur.do(t, "release", "released")
	})

	// One queue, in node order: distlock holds, Curator waits, another
	// distlock Client waits behind it; each release wakes the next in line,
	// not the one after it.
	t.Run("mixed queue", func(t *testing.T) {
		first, err := locks.Acquire(ctx, key)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		cur.send(t, "acquire")
		waitNodes(t, admin, key, 2)
		other := newClient(t, newBackendTimeout(t, z.Servers, holdTimeout), distlock.WithTTL(holdTimeout))
		type result struct {
			l   *distlock.Lock
			err error
		}
		granted := make(chan result, 1)
		go func() {
			l, err := other.Acquire(ctx, key)
			granted <- result{l, err}
		}()
		nodes := waitNodes(t, admin, key, 3)
		_, cst, err := admin.Get(dir + "/" + nodes[1])
		if err != nil || cst.EphemeralOwner != cur.session {
			t.Fatalf("second node %s: %+v, %v; want Curator's", nodes[1], cst, err)
		}
		if err := first.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if got := cur.next(t, 30*time.Second); got != "held" {
			t.Fatalf("Curator's acquire after the first release: %q, want held", got)
		}
		select {
		case r := <-granted:
			t.Fatalf("the third in line returned (%v) while Curator holds", r.err)
		default:
		}
		cur.do(t, "release", "released")
		var r result
		select {
		case r = <-granted:
		case <-time.After(30 * time.Second):
			t.Fatal("the third in line not granted 30s after Curator released")
		}
		if r.err != nil {
			t.Fatalf("third in line: %v", r.err)
		}
		if r.l.Token() <= uint64(cst.Czxid) {
			t.Errorf("token %d after Curator's %d", r.l.Token(), cst.Czxid)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	})
}
