package testserver

import (
	"bufio"
	"crypto/tls"
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

// Redis is a redis-server started by StartRedis.
type Redis struct {
	// Addr is the host:port of the server, on 127.0.0.1.
	Addr string
	// Port is the TCP port of the server.
	Port int
	// Dir is the server's working directory: redis.conf, redis.log and the
	// persistence files (appendonlydir, dump.rdb) live here.
	Dir string
	// TLS is set when the server was started WithRedisTLS: it then accepts
	// only TLS connections, from clients presenting a certificate signed
	// by TLS.CAFile.
	TLS *TLSFiles
	// Process is the server process: Stop (SIGTERM), Kill, Pause, Resume,
	// Restart (same port, directory and configuration; it waits until the
	// server answers PING, and a replica until it is in sync again).
	*Process
	// Clock is the server's wall clock, set when it was started
	// WithRedisMovableClock.
	Clock *MovableClock

	cfg       redisConfig
	clientTLS *tls.Config // for Do, with TLS
}

// RedisOption configures StartRedis.
type RedisOption func(*redisConfig)

type redisConfig struct {
	lines        []string
	primary      *Redis
	tls          bool
	movableClock bool
}

// WithRedisTLS serves TLS only (tls-port, no plain port) with a server
// certificate for 127.0.0.1 from a fresh test CA, and requires clients to
// present a certificate from that CA (tls-auth-clients yes). Redis.TLS
// names the CA and a client certificate. It cannot be combined with
// WithRedisReplicaOf.
func WithRedisTLS() RedisOption { return func(c *redisConfig) { c.tls = true } }

// WithRedisConfig appends lines to the generated redis.conf, for example
// "appendonly yes" or "save 60 1". They come after the defaults, so they
// override them.
func WithRedisConfig(lines ...string) RedisOption {
	return func(c *redisConfig) { c.lines = append(c.lines, lines...) }
}

// WithRedisAppendOnly enables the append-only file with fsync on every write
// ("appendonly yes", "appendfsync always"), so that writes acknowledged before
// Kill survive Restart.
func WithRedisAppendOnly() RedisOption {
	return WithRedisConfig("appendonly yes", "appendfsync always")
}

// WithRedisReplicaOf starts the server as a replica of primary. StartRedis
// then also waits until the replica reports master_link_status:up.
func WithRedisReplicaOf(primary *Redis) RedisOption {
	return func(c *redisConfig) { c.primary = primary }
}

// StartRedis starts a redis-server on a free port of 127.0.0.1 in a temporary
// directory and waits until it answers PING. RDB snapshots are disabled
// unless configured with WithRedisConfig. The server is stopped when the test
// ends.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	bin := Require(t, "redis-server")
	r := &Redis{}
	for _, o := range opts {
		o(&r.cfg)
	}
	if r.cfg.tls {
		if r.cfg.primary != nil {
			t.Fatal("testserver: WithRedisTLS with WithRedisReplicaOf is not supported")
		}
		files, err := writeTestPKI(t.TempDir())
		if err != nil {
			t.Fatalf("testserver: redis TLS files: %v", err)
		}
		if r.clientTLS, err = files.ClientTLS(); err != nil {
			t.Fatalf("testserver: redis TLS client: %v", err)
		}
		r.TLS = files
	}
	var env []string
	if r.cfg.movableClock {
		var vars []string
		r.Clock, vars = movableClock(t, "", nil)
		env = append(os.Environ(), vars...)
	}
	startWithRetry(t, "redis", func() ([]*Process, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir := t.TempDir()
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		r.Port = port
		r.Dir = dir
		conf := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(conf, []byte(r.config()), 0o644); err != nil {
			return nil, err
		}
		r.Process = &Process{
			name:         "redis-server " + r.Addr,
			path:         bin,
			args:         []string{conf},
			dir:          dir,
			env:          env,
			logPath:      filepath.Join(dir, "redis.log"),
			stopSig:      syscall.SIGTERM,
			ready:        r.probe,
			readyTimeout: startTimeout,
		}
		procs := []*Process{r.Process}
		if err := r.launch(t); err != nil {
			return procs, err
		}
		return procs, awaitAll(time.Now().Add(startTimeout), procs)
	})
	return r
}

func (r *Redis) config() string {
	var b strings.Builder
	for _, l := range []string{
		"bind 127.0.0.1",
		"protected-mode no",
		"daemonize no",
		"supervised no",
		`logfile ""`,
		"dir " + strconv.Quote(r.Dir),
		`save ""`,
		"appendonly no",
		"databases 16",
		// Full syncs start at once instead of waiting for more replicas.
		"repl-diskless-sync-delay 0",
	} {
		b.WriteString(l + "\n")
	}
	if f := r.TLS; f != nil {
		fmt.Fprintf(&b, "port 0\ntls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\ntls-auth-clients yes\n",
			r.Port, strconv.Quote(f.ServerCertFile), strconv.Quote(f.ServerKeyFile), strconv.Quote(f.CAFile))
	} else {
		fmt.Fprintf(&b, "port %d\n", r.Port)
	}
	if p := r.cfg.primary; p != nil {
		fmt.Fprintf(&b, "replicaof 127.0.0.1 %d\n", p.Port)
	}
	for _, l := range r.cfg.lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// probe is the readiness probe: PING, and for a replica the link to its
// primary up.
func (r *Redis) probe() error {
	v, err := r.Do("PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("PING replied %q", v)
	}
	if r.cfg.primary == nil {
		return nil
	}
	info, err := r.Do("INFO", "replication")
	if err != nil {
		return err
	}
	if s, _ := info.(string); !strings.Contains(s, "master_link_status:up") {
		return errors.New("replica not in sync with its primary yet")
	}
	return nil
}

// Do sends one command to the server over a new connection and returns the
// reply: string for simple and bulk strings, int64 for integers, nil for null
// replies, []any for arrays, and an error for error replies.
func (r *Redis) Do(args ...string) (any, error) {
	return respDo(r.Addr, 5*time.Second, r.clientTLS, args...)
}

// RedisError is an error reply from Redis.
type RedisError string

// Error implements error.
func (e RedisError) Error() string { return "redis: " + string(e) }

// respDo dials addr (over TLS with tlsCfg, if not nil), sends args as a
// RESP array of bulk strings and reads one reply.
func respDo(addr string, timeout time.Duration, tlsCfg *tls.Config, args ...string) (any, error) {
	var c net.Conn
	var err error
	if tlsCfg != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, tlsCfg)
	} else {
		c, err = net.DialTimeout("tcp", addr, timeout)
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	v, err := readRESP(bufio.NewReader(c))
	if err != nil {
		return nil, err
	}
	if e, ok := v.(RedisError); ok {
		return nil, e
	}
	return v, nil
}

func readRESP(br *bufio.Reader) (any, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("resp: empty line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return RedisError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readRESP(br); err != nil {
				return nil, err
			}
		}
		return arr, nil
	default:
		return nil, fmt.Errorf("resp: unexpected reply %q", line)
	}
}

// RedisCluster is a Redis Cluster of primaries started by
// StartRedisCluster, each holding an equal share of the 16384 slots.
type RedisCluster struct {
	// Nodes are the cluster's servers; node i holds the i-th share of
	// the slots.
	Nodes []*Redis
}

// Addrs returns the nodes' addresses, for redis.ClusterOptions.Addrs.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// StartRedisCluster starts n redis-servers in cluster mode (n >= 1), joins
// them with CLUSTER MEET, gives each an equal range of slots, and waits
// until every node reports the cluster ok and knows every other node and
// every slot. There are no replicas, and no TLS (WithRedisTLS is refused).
// The servers are stopped when the test ends.
func StartRedisCluster(t testing.TB, n int, opts ...RedisOption) *RedisCluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("StartRedisCluster: %d nodes, want at least 1", n)
	}
	var probe redisConfig
	for _, o := range opts {
		o(&probe)
	}
	if probe.tls {
		// It would need one CA for all nodes, tls-cluster and a cluster
		// bus port of its own per node.
		t.Fatal("testserver: StartRedisCluster with WithRedisTLS is not supported")
	}
	c := &RedisCluster{}
	for range n {
		o := append([]RedisOption{WithRedisConfig("cluster-enabled yes", "cluster-node-timeout 5000",
			"cluster-require-full-coverage yes")}, opts...)
		c.Nodes = append(c.Nodes, StartRedis(t, o...))
	}
	const slots = 16384
	for i, node := range c.Nodes {
		if i > 0 {
			if _, err := c.Nodes[0].Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(node.Port)); err != nil {
				t.Fatalf("CLUSTER MEET %s: %v", node.Addr, err)
			}
		}
		lo, hi := i*slots/n, (i+1)*slots/n-1
		if _, err := node.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE %d %d on %s: %v", lo, hi, node.Addr, err)
		}
	}
	want := []string{"cluster_state:ok", "cluster_slots_ok:16384", "cluster_known_nodes:" + strconv.Itoa(n)}
	deadline := time.Now().Add(startTimeout)
	for _, node := range c.Nodes {
		for {
			v, err := node.Do("CLUSTER", "INFO")
			info, _ := v.(string)
			ok := err == nil
			for _, w := range want {
				ok = ok && strings.Contains(info, w+"\r\n")
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redis cluster of %d nodes not ready on %s after %v: %v\n%s", n, node.Addr, startTimeout, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// StartRedisSentinel starts one Redis Sentinel (redis-server --sentinel) on a
// free port of 127.0.0.1 that monitors primary under name, with a quorum of
// 1, a primary considered down after 1s and a failover timeout of 5s. It
// waits until the Sentinel knows every replica listed in replicas as
// connected and in sync, so that a failover can promote it. The Sentinel is stopped when the test ends.
func StartRedisSentinel(t testing.TB, primary *Redis, name string, replicas ...*Redis) *Redis {
	t.Helper()
	bin := Require(t, "redis-server")
	s := &Redis{}
	startWithRetry(t, "redis sentinel", func() ([]*Process, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir := t.TempDir()
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		s.Port = port
		s.Dir = dir
		conf := filepath.Join(dir, "sentinel.conf")
		lines := []string{
			"bind 127.0.0.1",
			"port " + strconv.Itoa(port),
			"protected-mode no",
			"daemonize no",
			`logfile ""`,
			"dir " + strconv.Quote(dir),
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1", name, primary.Port),
			fmt.Sprintf("sentinel down-after-milliseconds %s 1000", name),
			fmt.Sprintf("sentinel failover-timeout %s 5000", name),
			fmt.Sprintf("sentinel parallel-syncs %s 1", name),
		}
		if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			return nil, err
		}
		s.Process = &Process{
			name:    "redis-sentinel " + s.Addr,
			path:    bin,
			args:    []string{conf, "--sentinel"},
			dir:     dir,
			logPath: filepath.Join(dir, "sentinel.log"),
			stopSig: syscall.SIGTERM,
			// After a Restart, answering PING is enough: the replicas
			// the Sentinel knew may have been promoted since.
			ready:        s.probe,
			readyTimeout: startTimeout,
		}
		procs := []*Process{s.Process}
		if err := s.launch(t); err != nil {
			return procs, err
		}
		deadline := time.Now().Add(startTimeout)
		if err := awaitAll(deadline, procs); err != nil {
			return procs, err
		}
		return procs, waitUntil(deadline, procs, func() error {
			v, err := s.Do("SENTINEL", "REPLICAS", name)
			if err != nil {
				return err
			}
			known, _ := v.([]any)
			for _, r := range replicas {
				// Known, connected, and in sync with the primary: a replica
				// the Sentinel would promote in a failover.
				ready := false
				for _, k := range known {
					fields, _ := k.([]any)
					f := map[any]any{}
					for i := 0; i+1 < len(fields); i += 2 {
						f[fields[i]] = fields[i+1]
					}
					if f["port"] == strconv.Itoa(r.Port) && f["flags"] == "slave" && f["master-link-status"] == "ok" {
						ready = true
					}
				}
				if !ready {
					return fmt.Errorf("sentinel does not know replica %s as a promotable replica yet", r.Addr)
				}
			}
			return nil
		})
	})
	return s
}
