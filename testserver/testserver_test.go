package testserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/faultproxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func mustDo(t *testing.T, r *Redis, args ...string) any {
	t.Helper()
	v, err := r.Do(args...)
	if err != nil {
		t.Fatalf("redis %v: %v", args, err)
	}
	return v
}

func TestRedis(t *testing.T) {
	t.Parallel()
	r := StartRedis(t)
	if got := mustDo(t, r, "PING"); got != "PONG" {
		t.Fatalf("PING = %v, want PONG", got)
	}
	mustDo(t, r, "SET", "k", "v")
	if got := mustDo(t, r, "GET", "k"); got != "v" {
		t.Fatalf("GET k = %v, want v", got)
	}
	if got := mustDo(t, r, "CONFIG", "GET", "save"); !equalArr(got, "save", "") {
		t.Fatalf("CONFIG GET save = %v, want snapshots disabled", got)
	}
	if _, err := r.Do("NOSUCHCOMMAND"); err == nil {
		t.Fatal("unknown command: want error reply")
	}

	// Pause: the server must not answer; Resume: it must again.
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := respDo(r.Addr, 300*time.Millisecond, nil, "PING"); err == nil {
		t.Fatal("paused server answered PING")
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	if got := mustDo(t, r, "PING"); got != "PONG" {
		t.Fatalf("PING after resume = %v", got)
	}

	r.Stop()
	if r.Running() {
		t.Fatal("running after Stop")
	}
	if _, err := r.Do("PING"); err == nil {
		t.Fatal("stopped server answered PING")
	}
}

func TestRedisKillRestartAppendOnly(t *testing.T) {
	t.Parallel()
	r := StartRedis(t, WithRedisAppendOnly())
	addr := r.Addr
	mustDo(t, r, "SET", "lock:a", "owner-1")
	mustDo(t, r, "RPUSH", "list", "x", "y")
	r.Kill()
	if r.Running() {
		t.Fatal("running after Kill")
	}
	r.Restart(t)
	if r.Addr != addr {
		t.Fatalf("addr changed across restart: %s -> %s", addr, r.Addr)
	}
	if got := mustDo(t, r, "GET", "lock:a"); got != "owner-1" {
		t.Fatalf("GET after kill+restart = %v, want owner-1", got)
	}
	if got := mustDo(t, r, "LRANGE", "list", "0", "-1"); !equalArr(got, "x", "y") {
		t.Fatalf("LRANGE after kill+restart = %v", got)
	}
}

func TestRedisReplica(t *testing.T) {
	t.Parallel()
	primary := StartRedis(t)
	replica := StartRedis(t, WithRedisReplicaOf(primary), WithRedisConfig("replica-read-only yes"))
	mustDo(t, primary, "SET", "k", "replicated")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if v, _ := replica.Do("GET", "k"); v == "replicated" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("key not replicated")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := replica.Do("SET", "k", "x"); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("SET on replica: err = %v, want READONLY", err)
	}
}

func equalArr(v any, want ...string) bool {
	arr, ok := v.([]any)
	if !ok || len(arr) != len(want) {
		return false
	}
	for i := range arr {
		if arr[i] != want[i] {
			return false
		}
	}
	return true
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func etcdPut(t *testing.T, m *EtcdMember, k, v string) {
	t.Helper()
	if err := m.Post("/v3/kv/put", map[string]string{"key": b64(k), "value": b64(v)}, nil); err != nil {
		t.Fatal(err)
	}
}

func etcdGet(t *testing.T, m *EtcdMember, k string) (string, bool) {
	t.Helper()
	var resp struct {
		Kvs []struct {
			Value string `json:"value"`
		} `json:"kvs"`
	}
	if err := m.Post("/v3/kv/range", map[string]string{"key": b64(k)}, &resp); err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", false
	}
	v, err := base64.StdEncoding.DecodeString(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return string(v), true
}

func TestEtcdSingleKillRestart(t *testing.T) {
	t.Parallel()
	e := StartEtcd(t)
	if len(e.Endpoints) != 1 || len(e.Members) != 1 {
		t.Fatalf("endpoints %v members %d", e.Endpoints, len(e.Members))
	}
	m := e.Members[0]
	if err := m.health(); err != nil {
		t.Fatal(err)
	}
	if l := e.Leader(t); l != m {
		t.Fatalf("leader = %s, want %s", l.Name, m.Name)
	}
	etcdPut(t, m, "/locks/a", "owner-1")
	if got, _ := etcdGet(t, m, "/locks/a"); got != "owner-1" {
		t.Fatalf("get = %q", got)
	}
	// etcdctl sees the same data.
	if out := e.Ctl(t, "get", "--print-value-only", "/locks/a"); strings.TrimSpace(out) != "owner-1" {
		t.Fatalf("etcdctl get = %q", out)
	}
	e.Ctl(t, "put", "/locks/b", "owner-2")

	m.Kill()
	if m.Running() {
		t.Fatal("running after Kill")
	}
	m.Restart(t)
	for k, want := range map[string]string{"/locks/a": "owner-1", "/locks/b": "owner-2"} {
		if got, ok := etcdGet(t, m, k); !ok || got != want {
			t.Fatalf("after kill+restart: %s = %q, %v; want %q", k, got, ok, want)
		}
	}
}

func TestEtcdCluster(t *testing.T) {
	t.Parallel()
	e := StartEtcdCluster(t, 3)
	if len(e.Endpoints) != 3 {
		t.Fatalf("endpoints = %v", e.Endpoints)
	}
	if out := e.Ctl(t, "endpoint", "status", "-w", "json"); strings.Count(out, `"Endpoint"`) != 3 {
		t.Fatalf("etcdctl endpoint status: %s", out)
	}
	leader := e.Leader(t)
	t.Logf("leader %s (id %x)", leader.Name, leader.ID(t))
	etcdPut(t, leader, "k", "v1")

	// Kill the leader: a new one must be elected among the others.
	leader.Kill()
	newLeader := e.Leader(t)
	if newLeader == leader {
		t.Fatal("killed member is still the leader")
	}
	etcdPut(t, newLeader, "k", "v2")

	// Restart the old leader: it rejoins and catches up.
	leader.Restart(t)
	e.WaitHealthy(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := etcdGet(t, leader, "k")
		if got == "v2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted member has k = %q, want v2", got)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Pause a follower and resume it.
	var follower *EtcdMember
	cur := e.Leader(t)
	for _, m := range e.Members {
		if m != cur {
			follower = m
			break
		}
	}
	if err := follower.Pause(); err != nil {
		t.Fatal(err)
	}
	etcdPut(t, cur, "k", "v3") // quorum of 2 still works
	if err := follower.Resume(); err != nil {
		t.Fatal(err)
	}
	e.WaitHealthy(t)

	// Full cluster crash and restart, one member at a time: the first
	// restart has no quorum and must not wait for health.
	for _, m := range e.Members {
		m.Kill()
	}
	for _, m := range e.Members {
		m.Restart(t)
	}
	e.WaitHealthy(t)
	if got, _ := etcdGet(t, e.Leader(t), "k"); got != "v3" {
		t.Fatalf("after full restart k = %q, want v3", got)
	}
}

func TestZooKeeperStandalone(t *testing.T) {
	t.Parallel()
	z := StartZooKeeper(t)
	m := z.Members[0]
	mode, err := m.Mode()
	if err != nil || mode != "standalone" {
		t.Fatalf("mode = %q, %v; want standalone", mode, err)
	}
	out, err := FourLetterWord(z.Servers[0], "srvr")
	if err != nil || !strings.Contains(out, "Zookeeper version") {
		t.Fatalf("srvr = %q, %v", out, err)
	}
	if l := z.Leader(t); l != m {
		t.Fatal("standalone server is not its own leader")
	}
	m.Kill()
	m.Restart(t)
	if mode, err := m.Mode(); err != nil || mode != "standalone" {
		t.Fatalf("after restart: mode = %q, %v", mode, err)
	}
}

func TestZooKeeperEnsemble(t *testing.T) {
	t.Parallel()
	z := StartZooKeeperEnsemble(t, 3)
	if got := strings.Count(z.ConnectString(), ","); got != 2 {
		t.Fatalf("connect string %q", z.ConnectString())
	}
	modes := map[string]int{}
	for _, m := range z.Members {
		mode, err := m.Mode()
		if err != nil {
			t.Fatal(err)
		}
		modes[mode]++
	}
	if modes["leader"] != 1 || modes["follower"] != 2 {
		t.Fatalf("modes = %v, want 1 leader and 2 followers", modes)
	}
	leader := z.Leader(t)
	leader.Kill()
	newLeader := z.Leader(t)
	if newLeader == leader {
		t.Fatal("killed member is still the leader")
	}
	leader.Restart(t)
	z.WaitReady(t)
	if mode, err := leader.Mode(); err != nil || mode != "follower" {
		t.Fatalf("restarted old leader: mode = %q, %v; want follower", mode, err)
	}

	// Full ensemble crash and restart, one member at a time.
	for _, m := range z.Members {
		m.Kill()
	}
	for _, m := range z.Members {
		m.Restart(t)
	}
	z.WaitReady(t)
	z.Leader(t)
}

func psql(t *testing.T, p *Postgres, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, PostgresBin(t, "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port),
		"-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-XAtq", "-c", sql)
	cmd.Env = pgEnv(t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v\n%s", sql, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t)
	if !strings.Contains(p.DSN, "127.0.0.1:"+strconv.Itoa(p.Port)) {
		t.Fatalf("DSN %q", p.DSN)
	}
	if got := psql(t, p, "select 1"); got != "1" {
		t.Fatalf("select 1 = %q", got)
	}
	psql(t, p, "create table locks(name text primary key, owner text); insert into locks values ('a', 'owner-1')")
	// Hold a connection open so Kill has a backend to get rid of.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hold := exec.CommandContext(ctx, PostgresBin(t, "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port),
		"-U", "postgres", "-XAtq", "-c", "select pg_sleep(60)")
	hold.Env = pgEnv(t.TempDir())
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for psql(t, p, "select count(*) from pg_stat_activity where query like 'select pg_sleep%'") != "1" {
		if time.Now().After(deadline) {
			t.Fatal("holding connection not seen")
		}
		time.Sleep(20 * time.Millisecond)
	}

	p.Kill()
	_ = hold.Wait()
	p.Restart(t)
	if got := psql(t, p, "select owner from locks where name = 'a'"); got != "owner-1" {
		t.Fatalf("after kill+restart: owner = %q", got)
	}
	p.Stop()
	if p.Running() {
		t.Fatal("running after Stop")
	}
	if err := pgHandshake(p.addr()); err == nil {
		t.Fatal("stopped server accepted a session")
	}
}

// recordTB records how Require ends the test instead of ending it.
type recordTB struct {
	testing.TB
	how, msg string
}

func (r *recordTB) Helper() {}
func (r *recordTB) Fatalf(f string, a ...any) {
	r.how, r.msg = "fatal", fmt.Sprintf(f, a...)
	runtime.Goexit()
}
func (r *recordTB) Skipf(f string, a ...any) {
	r.how, r.msg = "skip", fmt.Sprintf(f, a...)
	runtime.Goexit()
}

func TestRequireMissing(t *testing.T) {
	for ci, want := range map[string]string{"": "skip", "false": "skip", "true": "fatal"} {
		t.Setenv("CI", ci)
		rec := &recordTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Require(rec, "definitely-not-a-real-binary-xyz")
			rec.how = "returned"
		}()
		<-done
		if rec.how != want {
			t.Errorf("CI=%q: Require on a missing binary: %s, want %s", ci, rec.how, want)
		}
		if !strings.Contains(rec.msg, "definitely-not-a-real-binary-xyz") || !strings.Contains(rec.msg, InstallHint) {
			t.Errorf("CI=%q: message %q does not name the binary and %s", ci, rec.msg, InstallHint)
		}
	}
	if p := Require(t, "sh"); p == "" {
		t.Fatal("Require(sh) returned empty path")
	}
}

func TestFreePortUnique(t *testing.T) {
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

func TestStartWithRetry(t *testing.T) {
	sh := Require(t, "sh")
	attempts := 0
	startWithRetry(t, "fake", func() ([]*Process, error) {
		attempts++
		dir := t.TempDir()
		var script string
		if attempts == 1 {
			script = "echo 'bind: Address already in use' >&2; exit 1"
		} else {
			script = "exec sleep 60"
		}
		p := &Process{name: "fake", path: sh, args: []string{"-c", script}, dir: dir,
			logPath: dir + "/fake.log", stopSig: syscall.SIGTERM}
		if attempts == 1 {
			p.ready = func() error { return errors.New("never ready") }
		}
		if err := p.launch(t); err != nil {
			return nil, err
		}
		return []*Process{p}, p.awaitReady(time.Now().Add(5 * time.Second))
	})
	if attempts != 2 {
		t.Fatalf("attempts = %d, want 2", attempts)
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	c := StartRedisCluster(t, 3)
	if len(c.Addrs()) != 3 {
		t.Fatalf("Addrs() = %v", c.Addrs())
	}
	// Each node serves its own slots and redirects the others.
	slotOwner := map[string]int{"{a}": -1, "{b}": -1, "{c}": -1}
	for key := range slotOwner {
		for i, n := range c.Nodes {
			if _, err := n.Do("SET", key, "v"); err == nil {
				if slotOwner[key] >= 0 {
					t.Fatalf("nodes %d and %d both took %s", slotOwner[key], i, key)
				}
				slotOwner[key] = i
			} else if !strings.HasPrefix(err.Error(), "redis: MOVED ") {
				t.Fatalf("SET %s on node %d: %v", key, i, err)
			}
		}
		if slotOwner[key] < 0 {
			t.Fatalf("no node took %s", key)
		}
	}
}

func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	primary := StartRedis(t)
	replica := StartRedis(t, WithRedisReplicaOf(primary))
	s := StartRedisSentinel(t, primary, "main", replica)
	v := mustDo(t, s, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "main")
	if a, _ := v.([]any); len(a) != 2 || a[1] != strconv.Itoa(primary.Port) {
		t.Fatalf("primary by name = %v, want port %d", v, primary.Port)
	}
}

func TestEtcdTLS(t *testing.T) {
	t.Parallel()
	e := StartEtcd(t, WithEtcdTLS())
	if e.TLS == nil || !strings.HasPrefix(e.Endpoints[0], "https://") {
		t.Fatalf("endpoints %v, TLS %v", e.Endpoints, e.TLS)
	}
	e.Ctl(t, "put", "tls-key", "v")
	if got := e.Ctl(t, "get", "--print-value-only", "tls-key"); strings.TrimSpace(got) != "v" {
		t.Fatalf("etcdctl get over TLS = %q", got)
	}
}

func TestRedisTLS(t *testing.T) {
	t.Parallel()
	r := StartRedis(t, WithRedisTLS())
	if got := mustDo(t, r, "PING"); got != "PONG" {
		t.Fatalf("PING over TLS = %v", got)
	}
	if _, err := respDo(r.Addr, time.Second, nil, "PING"); err == nil {
		t.Fatal("plain-text PING answered by a TLS-only server")
	}
}

// psqlAt runs sql with psql against 127.0.0.1:port, database db, as user
// postgres, and returns its unaligned output.
func psqlAt(t *testing.T, port int, db, sql string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, PostgresBin(t, "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-U", "postgres", "-d", db, "-v", "ON_ERROR_STOP=1", "-XAtq", "-c", sql)
	cmd.Env = pgEnv(t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql -p %d %s %q: %v\n%s", port, db, sql, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestPgBouncer(t *testing.T) {
	t.Parallel()
	p := StartPostgres(t)
	b := StartPgBouncer(t, p)
	if b.Port == p.Port || !strings.Contains(b.DSN, "127.0.0.1:"+strconv.Itoa(b.Port)) {
		t.Fatalf("bouncer DSN %q, port %d; server port %d", b.DSN, b.Port, p.Port)
	}
	psql(t, p, "create table t(v text); insert into t values ('through')")
	if got := psqlAt(t, b.Port, "postgres", "select v from t"); got != "through" {
		t.Fatalf("select through the bouncer = %q", got)
	}
	// The admin console reports the pool mode the helper promises.
	if got := psqlAt(t, b.Port, "pgbouncer", "SHOW CONFIG"); !strings.Contains(got, "\npool_mode|transaction|") {
		t.Fatalf("SHOW CONFIG has no pool_mode transaction:\n%s", got)
	}

	if err := b.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := pgHandshake(b.addr()); err == nil {
		t.Fatal("paused bouncer accepted a session")
	}
	if err := b.Resume(); err != nil {
		t.Fatal(err)
	}
	b.Kill()
	if b.Running() {
		t.Fatal("running after Kill")
	}
	b.Restart(t)
	if got := psqlAt(t, b.Port, "postgres", "select v from t"); got != "through" {
		t.Fatalf("select through the restarted bouncer = %q", got)
	}
}

// Members told to reach each other through proxies (WithPeerAddress) form
// an ensemble. Cutting the leader's proxied links, both ways, while its
// process runs, cuts its quorum links: it stops serving. Killed and
// restarted cut off (RestartAlone), it answers ruok without serving, and
// with the election links it had opened around the proxies gone (see
// WithPeerAddress) the two others elect a leader of their own. Once the
// links heal, every member serves again.
func TestZooKeeperEnsemblePeerLinks(t *testing.T) {
	t.Parallel()
	links := map[[2]int][]*faultproxy.Proxy{} // by {from, to}
	z := StartZooKeeperEnsemble(t, 3, WithPeerAddress(func(from, to int, addr string) (string, error) {
		p, err := faultproxy.New(addr)
		if err != nil {
			return "", err
		}
		t.Cleanup(p.Close)
		links[[2]int{from, to}] = append(links[[2]int{from, to}], p)
		return p.Addr(), nil
	}))
	old := z.Leader(t)
	cut := func(f func(*faultproxy.Proxy)) {
		for k, ps := range links {
			if k[0] == old.ID || k[1] == old.ID {
				for _, p := range ps {
					f(p)
				}
			}
		}
	}
	cut((*faultproxy.Proxy).Blackhole)
	deadline := time.Now().Add(clusterStartTimeout)
	for {
		_, err := old.serving()
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("zookeeper %d still serves with every link cut", old.ID)
		}
		time.Sleep(50 * time.Millisecond)
	}
	old.Kill()
	old.RestartAlone(t)
	if _, err := old.serving(); err == nil {
		t.Fatalf("zookeeper %d serves, restarted cut off from its peers", old.ID)
	}
	if l := z.Leader(t); l == old {
		t.Fatalf("zookeeper %d, cut off, leads", old.ID)
	}
	cut((*faultproxy.Proxy).Heal)
	z.WaitReady(t)
	if _, err := old.serving(); err != nil {
		t.Fatalf("zookeeper %d after the links healed: %v", old.ID, err)
	}
}

// Members that advertise proxies to their peers (WithEtcdPeerAddress),
// each proxy telling its connections apart by the member that dialed them
// (DialedBy), form a cluster. Cutting the leader's links both ways
// (its own proxy, and its connections through the others') while its
// process runs makes it lose the cluster: the two others elect a leader of
// their own, and a write through the cut member fails; killed, it restarts
// cut off (RestartAlone) without serving. Once the links heal, every
// member serves again.
func TestEtcdClusterPeerLinks(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("DialedBy reads /proc: Linux only")
	}
	t.Parallel()
	proxies := make([]*faultproxy.Proxy, 3)
	e := StartEtcdCluster(t, 3, WithEtcdPeerAddress(func(member int, addr string) (string, error) {
		p, err := faultproxy.New(addr)
		if err != nil {
			return "", err
		}
		t.Cleanup(p.Close)
		proxies[member] = p
		return p.Addr(), nil
	}))
	procs := e.procs()
	for _, p := range proxies {
		p.SetOrigin(func(c net.Conn) string {
			if i := DialedBy(c, procs...); i >= 0 {
				return e.Members[i].Name
			}
			return ""
		})
	}
	// Every member dials each of the others (raft's streams).
	deadline := time.Now().Add(clusterStartTimeout)
	for i, p := range proxies {
		for j, m := range e.Members {
			for j != i && p.Origins()[m.Name] == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("no connection of %s told apart through %s's proxy: %v", m.Name, e.Members[i].Name, p.Origins())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	old := e.Leader(t)
	cut := func(on bool) {
		for i, p := range proxies {
			switch {
			case e.Members[i] == old && on:
				p.Blackhole()
			case e.Members[i] == old:
				p.Heal()
			case on:
				p.BlackholeFrom(old.Name)
			default:
				p.HealFrom(old.Name)
			}
		}
	}
	cut(true)
	deadline = time.Now().Add(clusterStartTimeout)
	var newLeader uint64
	for {
		for _, m := range e.Members {
			if st, err := m.status(); m != old && err == nil && st.Leader == st.Header.MemberID &&
				m.Post("/v3/kv/put", map[string]string{"key": b64("k"), "value": b64("cut")}, nil) == nil {
				newLeader = uint64(st.Leader)
			}
		}
		if newLeader != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the members beside the cut-off %s wrote nothing within %v", old.Name, clusterStartTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := old.Post("/v3/kv/put", map[string]string{"key": b64("k"), "value": b64("stale")}, nil); err == nil {
		t.Fatalf("a write through %s succeeded while it was cut off from its peers", old.Name)
	}
	// Cut both ways, the old leader hears nothing of the new one: a cut
	// of its own proxy alone would leave the links it dialed, which carry
	// the others' messages to it.
	if st, err := old.status(); err != nil || uint64(st.Leader) == newLeader {
		t.Fatalf("the cut-off %s: status %+v, %v; it follows the new leader %x", old.Name, st, err, newLeader)
	}
	// Killed and restarted while cut off, it starts without serving (the
	// restart does not wait for it to), and its new process's connections
	// are cut too.
	old.Kill()
	old.RestartAlone(t)
	if err := old.Post("/v3/kv/put", map[string]string{"key": b64("k"), "value": b64("stale")}, nil); err == nil {
		t.Fatalf("a write through %s succeeded, restarted cut off from its peers", old.Name)
	}
	cut(false)
	e.WaitHealthy(t)
	etcdPut(t, old, "k", "healed")
	if got, _ := etcdGet(t, e.Leader(t), "k"); got != "healed" {
		t.Fatalf("after the links healed k = %q, want healed", got)
	}
}
