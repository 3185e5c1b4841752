package testserver

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ZooKeeper is a ZooKeeper server or ensemble started by StartZooKeeper or
// StartZooKeeperEnsemble.
type ZooKeeper struct {
	// Servers are the client addresses ("127.0.0.1:PORT") of all members.
	Servers []string
	// Members are the servers, in the order of Servers.
	Members []*ZooKeeperMember
}

// ZooKeeperMember is one ZooKeeper server.
type ZooKeeperMember struct {
	// ID is the server id (myid), starting at 1.
	ID int
	// Addr is the client address, "127.0.0.1:PORT".
	Addr string
	// QuorumAddr and ElectionAddr are the member's own quorum port (its
	// followers connect there while it leads) and election port,
	// "127.0.0.1:PORT": the addresses a WithPeerAddress function is asked
	// about.
	QuorumAddr, ElectionAddr string
	// Dir holds zoo.cfg, zookeeper.log and the data directory "data".
	Dir string
	// Process is the server's JVM: Stop (SIGTERM), Kill, Pause, Resume,
	// Restart (same ports and data directory; it waits until the server
	// serves requests, or, while the ensemble has no running quorum, until
	// it answers ruok).
	*Process

	ensemble *ZooKeeper
}

// zkTickMillis is the ZooKeeper tickTime used by the helpers. Session
// timeouts may range from 2 ticks to maxSessionTimeout (60s).
const zkTickMillis = 200

// StartZooKeeper starts a standalone ZooKeeper server and waits until it
// serves requests. It is stopped when the test ends.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	return StartZooKeeperEnsemble(t, 1)
}

// StartZooKeeperEnsemble starts an ensemble of n ZooKeeper servers on free
// ports of 127.0.0.1 (n == 1 starts a standalone server) and waits until every
// member serves requests as leader or follower. Each server is a JVM running
// QuorumPeerMain with a 256 MB heap, tickTime 200ms, the admin server off
// and all four-letter words allowed. The ensemble is stopped when the test
// ends.
//
// WithPeerAddress names the addresses the members reach each other at, so
// that a test can put a proxy on each link between two servers, and
// WithSyncLimit how long a follower goes on without its leader.
func StartZooKeeperEnsemble(t testing.TB, n int, opts ...ZooKeeperOption) *ZooKeeper {
	t.Helper()
	var o zkOptions
	for _, opt := range opts {
		opt(&o)
	}
	if n < 1 {
		t.Fatalf("testserver: StartZooKeeperEnsemble: n = %d, want >= 1", n)
	}
	java := zkJava(t)
	cp := zkClasspath()
	if cp == "" {
		Missing(t, "ZooKeeper server jar (zookeeper.jar)")
	}
	z := &ZooKeeper{}
	startWithRetry(t, fmt.Sprintf("zookeeper ensemble of %d", n), func() ([]*Process, error) {
		ports, err := freePorts(3 * n)
		if err != nil {
			return nil, err
		}
		z.Servers = make([]string, n)
		z.Members = make([]*ZooKeeperMember, n)
		for i := range n {
			m := &ZooKeeperMember{
				ID:           i + 1,
				Addr:         net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3*i])),
				QuorumAddr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3*i+1])),
				ElectionAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3*i+2])),
				ensemble:     z,
			}
			z.Members[i] = m
			z.Servers[i] = m.Addr
		}
		// servers returns the server lines of member from's zoo.cfg: its
		// own ports, and the others' as o.peer names them.
		servers := func(from int) ([]string, error) {
			var lines []string
			for i := range n {
				quorum, election := z.Members[i].QuorumAddr, z.Members[i].ElectionAddr
				if o.peer != nil && i+1 != from {
					var err error
					if quorum, err = o.peer(from, i+1, quorum); err != nil {
						return nil, err
					}
					if election, err = o.peer(from, i+1, election); err != nil {
						return nil, err
					}
				}
				qhost, qport, err := net.SplitHostPort(quorum)
				if err != nil {
					return nil, err
				}
				ehost, eport, err := net.SplitHostPort(election)
				if err != nil {
					return nil, err
				}
				if qhost != ehost {
					return nil, fmt.Errorf("testserver: zookeeper %d reaches %d at %s and %s: one host for both ports, please", from, i+1, quorum, election)
				}
				lines = append(lines, fmt.Sprintf("server.%d=%s:%s:%s", i+1, qhost, qport, eport))
			}
			return lines, nil
		}
		procs := make([]*Process, n)
		for i, m := range z.Members {
			m.Dir = t.TempDir()
			data := filepath.Join(m.Dir, "data")
			if err := os.MkdirAll(data, 0o755); err != nil {
				return nil, err
			}
			cfg := []string{
				"tickTime=" + strconv.Itoa(zkTickMillis),
				"initLimit=25",
				"syncLimit=" + strconv.Itoa(cmp.Or(o.syncLimit, 10)),
				"dataDir=" + data,
				"clientPort=" + strconv.Itoa(ports[3*i]),
				"clientPortAddress=127.0.0.1",
				"maxClientCnxns=0",
				"maxSessionTimeout=60000",
				"admin.enableServer=false",
				"4lw.commands.whitelist=*",
				"snapshot.trust.empty=true",
				"cnxTimeout=1000",
			}
			if n > 1 {
				lines, err := servers(m.ID)
				if err != nil {
					return nil, err
				}
				cfg = append(cfg, lines...)
				if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(m.ID)+"\n"), 0o644); err != nil {
					return nil, err
				}
			}
			cfgPath := filepath.Join(m.Dir, "zoo.cfg")
			if err := os.WriteFile(cfgPath, []byte(strings.Join(cfg, "\n")+"\n"), 0o644); err != nil {
				return nil, err
			}
			m.Process = &Process{
				name: fmt.Sprintf("zookeeper %d %s", m.ID, m.Addr),
				path: java,
				args: []string{
					"-Xmx256m", "-Xms32m", "-Xss512k",
					"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
					"-Djava.net.preferIPv4Stack=true",
					"-Djava.awt.headless=true",
					"-Dzookeeper.admin.enableServer=false",
					"-Dzookeeper.jmx.log4j.disable=true",
					"-Dorg.slf4j.simpleLogger.showDateTime=true",
					"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
					"-cp", cp,
					"org.apache.zookeeper.server.quorum.QuorumPeerMain",
					cfgPath,
				},
				dir:          m.Dir,
				env:          zkEnv(),
				logPath:      filepath.Join(m.Dir, "zookeeper.log"),
				stopSig:      syscall.SIGTERM,
				ready:        m.probe,
				readyTimeout: clusterStartTimeout,
				alive:        m.ruok,
			}
			procs[i] = m.Process
		}
		for _, p := range procs {
			if err := p.launch(t); err != nil {
				return procs, err
			}
		}
		return procs, awaitAll(time.Now().Add(clusterStartTimeout), procs)
	})
	return z
}

// A ZooKeeperOption configures StartZooKeeperEnsemble.
type ZooKeeperOption func(*zkOptions)

type zkOptions struct {
	peer      func(from, to int, addr string) (string, error)
	syncLimit int
}

// WithSyncLimit sets the members' syncLimit, in ticks of 200ms (10 by
// default): how long a follower goes on serving its clients without
// hearing from its leader, and the leader keeps a follower it does not
// hear from, before giving up on each other.
func WithSyncLimit(ticks int) ZooKeeperOption {
	return func(o *zkOptions) { o.syncLimit = ticks }
}

// WithPeerAddress makes f name the address at which member from (an ID)
// reaches member to's quorum or election port, addr ("127.0.0.1:PORT"),
// in from's zoo.cfg: f returns addr itself or a proxy's address for it
// (on the same host for both ports: zoo.cfg has one host per server),
// so that a test can cut links between servers. Every quorum link (a
// follower's connection to its leader) passes the address its follower
// was given. An election link may not: a server that receives an
// election connection from one of lower id drops it and connects back to
// the address that server announces, its own; no proxy sits there, and
// a cut of the proxies leaves that link up. f is called once per member,
// link and port at each start attempt (an attempt that fails is retried
// on new ports). Restart keeps the addresses.
func WithPeerAddress(f func(from, to int, addr string) (string, error)) ZooKeeperOption {
	return func(o *zkOptions) { o.peer = f }
}

// zkJava finds the java binary: $JAVA_HOME/bin/java or java in PATH.
func zkJava(t testing.TB) string {
	t.Helper()
	if home := os.Getenv("JAVA_HOME"); home != "" {
		if p, err := lookBin(filepath.Join(home, "bin", "java")); err == nil {
			return p
		}
	}
	return Require(t, "java")
}

// zkEnv drops variables that would inject JVM options into the servers.
func zkEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "JAVA_TOOL_OPTIONS=") || strings.HasPrefix(kv, "_JAVA_OPTIONS=") || strings.HasPrefix(kv, "JDK_JAVA_OPTIONS=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// zkClasspath returns the class path of the ZooKeeper server, or "" if the
// jars are not installed. $ZOOKEEPER_CLASSPATH wins. Otherwise it uses the jars
// of the Debian package (/usr/share/java/zookeeper.jar, whose manifest lists
// its dependencies, plus the CLASSPATH of /etc/zookeeper/conf/environment), or
// the lib directory of an Apache tarball in $ZOOKEEPER_HOME. An slf4j binding
// (slf4j-simple) is added when available so the server log is not lost.
func zkClasspath() string {
	if cp := os.Getenv("ZOOKEEPER_CLASSPATH"); cp != "" {
		return cp
	}
	var jars []string
	seen := map[string]bool{}
	add := func(patterns ...string) {
		for _, pat := range patterns {
			matches, _ := filepath.Glob(pat)
			for _, m := range matches {
				if st, err := os.Stat(m); err == nil && !st.IsDir() && strings.HasSuffix(m, ".jar") && !seen[m] {
					seen[m] = true
					jars = append(jars, m)
				}
			}
		}
	}
	if home := os.Getenv("ZOOKEEPER_HOME"); home != "" {
		add(filepath.Join(home, "zookeeper-*.jar"), filepath.Join(home, "lib", "*.jar"))
	}
	add("/usr/share/java/zookeeper.jar")
	for _, env := range []string{"/etc/zookeeper/conf/environment", "/usr/share/zookeeper/bin/zkEnv.sh"} {
		add(classpathFromShell(env)...)
	}
	if !hasZooKeeperJar(jars) {
		add("/usr/share/zookeeper/zookeeper*.jar", "/usr/share/zookeeper/lib/*.jar")
	}
	if !hasZooKeeperJar(jars) {
		return ""
	}
	if !hasSLF4JBinding(jars) {
		add("/usr/share/java/slf4j-simple.jar")
	}
	return strings.Join(jars, string(os.PathListSeparator))
}

func hasZooKeeperJar(jars []string) bool {
	for _, j := range jars {
		b := filepath.Base(j)
		if strings.HasPrefix(b, "zookeeper") && !strings.Contains(b, "jute") && !strings.Contains(b, "contrib") && !strings.Contains(b, "recipes") {
			return true
		}
	}
	return false
}

func hasSLF4JBinding(jars []string) bool {
	for _, j := range jars {
		b := filepath.Base(j)
		if strings.HasPrefix(b, "logback-classic") || strings.HasPrefix(b, "slf4j-simple") || strings.HasPrefix(b, "slf4j-log4j12") || strings.HasPrefix(b, "slf4j-reload4j") {
			return true
		}
	}
	return false
}

// classpathFromShell extracts the jar entries of a CLASSPATH="..." line of a
// shell environment file.
func classpathFromShell(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimPrefix(line, "export ")
		v, ok := strings.CutPrefix(line, "CLASSPATH=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		for _, e := range strings.Split(v, ":") {
			if strings.HasSuffix(e, ".jar") && !strings.Contains(e, "$") {
				out = append(out, e)
			}
		}
	}
	return out
}

// FourLetterWord sends a ZooKeeper four-letter command (ruok, srvr, stat,
// mntr, ...) to addr and returns the full reply.
func FourLetterWord(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// Mode returns the member's mode from srvr: "standalone", "leader",
// "follower" or "observer", or an error if it does not serve requests.
func (m *ZooKeeperMember) Mode() (string, error) {
	out, err := FourLetterWord(m.Addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("zookeeper %d: srvr: %q", m.ID, strings.TrimSpace(out))
}

// zxid returns the last zxid from srvr.
func (m *ZooKeeperMember) zxid() uint64 {
	out, _ := FourLetterWord(m.Addr, "srvr")
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "Zxid: "); ok {
			z, _ := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(v), "0x"), 16, 64)
			return z
		}
	}
	return 0
}

func (m *ZooKeeperMember) ruok() error {
	out, err := FourLetterWord(m.Addr, "ruok")
	if err != nil {
		return err
	}
	if out != "imok" {
		return fmt.Errorf("zookeeper %d: ruok: %q", m.ID, out)
	}
	return nil
}

// serving checks ruok == imok and that srvr reports a serving mode.
func (m *ZooKeeperMember) serving() (string, error) {
	if err := m.ruok(); err != nil {
		return "", err
	}
	mode, err := m.Mode()
	if err != nil {
		return "", err
	}
	switch mode {
	case "standalone", "leader", "follower", "observer":
		return mode, nil
	}
	return "", fmt.Errorf("zookeeper %d: mode %q", m.ID, mode)
}

func (z *ZooKeeper) procs() []*Process {
	ps := make([]*Process, len(z.Members))
	for i, m := range z.Members {
		ps[i] = m.Process
	}
	return ps
}

// probe is the server's readiness probe: serving requests, or, while the
// ensemble has no running quorum (a server restarted after a full crash),
// answering ruok, as no server of it can serve before a quorum runs.
func (m *ZooKeeperMember) probe() error {
	if !quorum(m.ensemble.procs()) {
		return m.ruok()
	}
	_, err := m.serving()
	return err
}

// ConnectString returns the comma-separated client addresses, as expected by
// ZooKeeper clients.
func (z *ZooKeeper) ConnectString() string { return strings.Join(z.Servers, ",") }

// Leader waits until a running member reports "Mode: leader" (or
// "standalone") in srvr and returns it; if several do, the one with the
// highest zxid wins. The test fails if there is no leader in time.
func (z *ZooKeeper) Leader(t testing.TB) *ZooKeeperMember {
	t.Helper()
	var leader *ZooKeeperMember
	err := waitUntil(time.Now().Add(clusterStartTimeout), nil, func() error {
		leader = nil
		var best uint64
		for _, m := range z.Members {
			if !m.Running() {
				continue
			}
			mode, err := m.Mode()
			if err != nil || (mode != "leader" && mode != "standalone") {
				continue
			}
			if zx := m.zxid(); leader == nil || zx > best {
				leader, best = m, zx
			}
		}
		if leader == nil {
			return errors.New("no member reports Mode: leader")
		}
		return nil
	})
	if err != nil {
		t.Fatal(startFailure("zookeeper leader", err, z.procs()))
	}
	return leader
}

// WaitReady waits until every running member answers ruok and reports a
// serving mode in srvr.
func (z *ZooKeeper) WaitReady(t testing.TB) {
	t.Helper()
	err := waitUntil(time.Now().Add(clusterStartTimeout), nil, func() error {
		for _, m := range z.Members {
			if !m.Running() {
				continue
			}
			if _, err := m.serving(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(startFailure("zookeeper ensemble", err, z.procs()))
	}
}
