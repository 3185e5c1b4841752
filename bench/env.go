package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/distlock/testserver"
)

// Env holds the servers of one run. They are started on first use, from the
// test goroutine, and stopped when the test ends. Every Redis client that a
// subject opens counts the commands it sends (see Snapshot).
type Env struct {
	tb     testing.TB
	redis  []*testserver.Redis // redis[0] alone serves the single-node subjects
	etcd   *testserver.Etcd
	zk     *testserver.ZooKeeper
	pg     *testserver.Postgres
	admins map[string]*redis.Client // uncounted clients for INFO, by address

	sent   atomic.Int64 // commands sent by counted Redis clients
	sentBy sync.Map     // command name -> *atomic.Int64

	pgSent   atomic.Int64 // statements sent by counted PostgreSQL pools
	pgSentBy sync.Map     // statement name -> *atomic.Int64

	pgb *testserver.PgBouncer // in front of pg, started by PgBouncer

	// via, when set, routes the addresses the Env gives out (Redis,
	// Etcd, ZooKeeper, the PostgreSQL pools, the gateway's URL) through
	// proxies: set while an instance whose connections can be cut is
	// opened (the partitioning measurement's kill).
	via func(addr string) (string, error)
}

// route returns addr, or where e.via routes it.
func (e *Env) route(addr string) string {
	e.tb.Helper()
	if e.via == nil {
		return addr
	}
	a, err := e.via(addr)
	if err != nil {
		e.tb.Fatalf("bench: route %s: %v", addr, err)
	}
	return a
}

// NewEnv returns an Env whose servers live as long as tb.
func NewEnv(tb testing.TB) *Env {
	return &Env{tb: tb, admins: map[string]*redis.Client{}}
}

// Redis returns the addresses of n Redis servers, starting them if needed.
// Subjects that need one server use the first, which all of them share.
func (e *Env) Redis(n int) []string {
	e.tb.Helper()
	for len(e.redis) < n {
		e.redis = append(e.redis, testserver.StartRedis(e.tb))
	}
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = e.route(e.redis[i].Addr)
	}
	return addrs
}

// Etcd returns the endpoints of a single-node etcd, starting it if needed.
func (e *Env) Etcd() []string {
	e.tb.Helper()
	if e.etcd == nil {
		e.etcd = testserver.StartEtcd(e.tb)
	}
	if e.via == nil {
		return e.etcd.Endpoints
	}
	var eps []string
	for _, ep := range e.etcd.Endpoints {
		u, err := routeURL(ep, e.via)
		if err != nil {
			e.tb.Fatalf("bench: route %s: %v", ep, err)
		}
		eps = append(eps, u)
	}
	return eps
}

// RedisClient returns a go-redis client of addr with default options, whose
// commands are counted. The caller closes it.
func (e *Env) RedisClient(addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	c.AddHook(counter{n: &e.sent, by: &e.sentBy})
	return c
}

// EtcdClient returns a clientv3 client of endpoints. The caller closes it.
func (e *Env) EtcdClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
}

func (e *Env) admin(addr string) *redis.Client {
	c := e.admins[addr]
	if c == nil {
		c = redis.NewClient(&redis.Options{Addr: addr})
		e.admins[addr] = c
		e.tb.Cleanup(func() { c.Close() })
	}
	return c
}

// counter is a go-redis hook that counts the commands a client sends,
// pipelined ones included. Pub/sub commands bypass hooks; Snapshot takes
// them from the server's statistics instead.
type counter struct {
	n  *atomic.Int64
	by *sync.Map
}

func (h counter) count(cmd redis.Cmder) {
	h.n.Add(1)
	v, ok := h.by.Load(cmd.Name())
	if !ok {
		v, _ = h.by.LoadOrStore(cmd.Name(), new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
}

func (counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// Snapshot is a reading of a service's request counters.
type Snapshot struct {
	// Requests counts what clients sent: Redis commands (a script call is
	// one, pipelined commands count one each), etcd gRPC messages (unary
	// requests and stream messages such as watch creations and lease
	// keep-alives), ZooKeeper packets (pings included) or PostgreSQL
	// statements.
	Requests int64
	// Ops counts the work the server did: every Redis command executed,
	// those run inside scripts included (INFO excluded), etcd's MVCC
	// range, put, delete and txn operations, or ZooKeeper's reads and
	// writes; 0 for PostgreSQL.
	Ops int64
	// ByName breaks Ops down by command (Redis), into reads and writes
	// (ZooKeeper), or Requests by gRPC method (etcd).
	ByName map[string]int64
	// RequestsByName breaks Requests down by command (Redis) or statement
	// (PostgreSQL).
	RequestsByName map[string]int64
	// ServerMicros is the time Redis spent executing the commands clients
	// sent (INFO commandstats usec; a script's time includes the commands
	// it runs, which are not counted again); 0 for etcd. It is set by Sub,
	// on a difference of two snapshots.
	ServerMicros int64
	// UsecByName is INFO commandstats usec by command, scripts' inner
	// commands included.
	UsecByName map[string]int64
}

// Sub returns s - o.
func (s Snapshot) Sub(o Snapshot) Snapshot {
	d := Snapshot{Requests: s.Requests - o.Requests, Ops: s.Ops - o.Ops,
		ByName: subMap(s.ByName, o.ByName), RequestsByName: subMap(s.RequestsByName, o.RequestsByName),
		UsecByName: subMap(s.UsecByName, o.UsecByName)}
	d.ServerMicros = topLevelMicros(d)
	return d
}

// topLevelMicros is the server time of the commands clients sent, out of
// d's per-command times. commandstats counts a command run inside a script
// under its own name as well, and the script's time already includes it:
// of each command's time, only the share of its calls that clients sent
// (RequestsByName, which also holds the pub/sub commands) is counted.
func topLevelMicros(d Snapshot) int64 {
	var us float64
	for name, t := range d.UsecByName {
		calls, sent := d.ByName[name], d.RequestsByName[name]
		if calls <= 0 || sent <= 0 {
			continue
		}
		us += float64(t) * min(1, float64(sent)/float64(calls))
	}
	return int64(us + 0.5)
}

func subMap(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range a {
		if v -= b[k]; v != 0 {
			out[k] = v
		}
	}
	return out
}

// pubsubCommands are sent outside go-redis hooks and never run in scripts.
var pubsubCommands = map[string]bool{
	"subscribe": true, "unsubscribe": true, "psubscribe": true,
	"punsubscribe": true, "ssubscribe": true, "sunsubscribe": true,
}

// RedisSnapshot reads the command statistics of the first n Redis servers
// (summed) and the client-side count.
func (e *Env) RedisSnapshot(ctx context.Context, n int) (Snapshot, error) {
	s := Snapshot{Requests: e.sent.Load(), ByName: map[string]int64{}, RequestsByName: map[string]int64{}, UsecByName: map[string]int64{}}
	e.sentBy.Range(func(k, v any) bool {
		s.RequestsByName[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	for _, r := range e.redis[:n] {
		info, err := e.admin(r.Addr).Info(ctx, "commandstats").Result()
		if err != nil {
			return s, err
		}
		for name, st := range parseCommandStats(info) {
			if name == "info" {
				continue
			}
			calls := st.calls
			s.UsecByName[name] += st.usec
			s.ByName[name] += calls
			s.Ops += calls
			if pubsubCommands[name] {
				s.Requests += calls
				s.RequestsByName[name] += calls
			}
		}
	}
	return s, nil
}

type cmdStat struct{ calls, usec int64 }

// parseCommandStats parses INFO commandstats: lines such as
// "cmdstat_evalsha:calls=12,usec=..." (subcommands as "cmdstat_config|get").
func parseCommandStats(info string) map[string]cmdStat {
	out := map[string]cmdStat{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		var st cmdStat
		for field := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			} else if v, ok := strings.CutPrefix(field, "usec="); ok {
				st.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[name] = st
	}
	return out
}

// etcdHTTP reads /metrics without keeping connections (and their
// goroutines) alive between readings.
var etcdHTTP = &http.Client{
	Timeout: 5 * time.Second,
	Transport: &http.Transport{
		Proxy:             nil,
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: time.Second}).DialContext,
	},
}

// EtcdSnapshot reads the request counters of the etcd member from its
// Prometheus /metrics endpoint.
func (e *Env) EtcdSnapshot(ctx context.Context) (Snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.etcd.Members[0].ClientURL+"/metrics", nil)
	if err != nil {
		return Snapshot{}, err
	}
	resp, err := etcdHTTP.Do(req)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w (running: %v; end of etcd.log: %s)", err, e.etcd.Members[0].Running(), e.etcdLogTail())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Snapshot{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return parseEtcdMetrics(bufio.NewScanner(resp.Body))
}

// parseEtcdMetrics sums grpc_server_msg_received_total (by grpc_method)
// and etcd_mvcc_{range,put,delete,txn}_total from Prometheus text.
func parseEtcdMetrics(sc *bufio.Scanner) (Snapshot, error) {
	s := Snapshot{ByName: map[string]int64{}}
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		metric := line[:sp]
		switch {
		case strings.HasPrefix(metric, "grpc_server_msg_received_total{"):
			s.Requests += int64(v)
			s.ByName[label(metric, "grpc_method")] += int64(v)
		case metric == "etcd_mvcc_range_total", metric == "etcd_mvcc_put_total",
			metric == "etcd_mvcc_delete_total", metric == "etcd_mvcc_txn_total":
			s.Ops += int64(v)
		}
	}
	return s, sc.Err()
}

// label returns the value of a Prometheus label in metric{a="x",b="y"}.
func label(metric, name string) string {
	i := strings.Index(metric, name+`="`)
	if i < 0 {
		return ""
	}
	rest := metric[i+len(name)+2:]
	if j := strings.IndexByte(rest, '"'); j >= 0 {
		return rest[:j]
	}
	return rest
}

// Versions reports the versions of the servers started so far.
func (e *Env) Versions(ctx context.Context) map[string]string {
	out := map[string]string{}
	if len(e.redis) > 0 {
		if info, err := e.admin(e.redis[0].Addr).Info(ctx, "server").Result(); err == nil {
			for line := range strings.SplitSeq(info, "\n") {
				if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
					out["Redis"] = v
				}
			}
		}
	}
	if e.etcd != nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.etcd.Members[0].ClientURL+"/version", nil)
		if resp, err := etcdHTTP.Do(req); err == nil {
			var b strings.Builder
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				b.WriteString(sc.Text())
			}
			resp.Body.Close()
			if v := label(strings.ReplaceAll(b.String(), `":"`, `="`), "etcdserver"); v != "" {
				out["etcd"] = v
			}
		}
	}
	e.zkVersion(out)
	e.pgVersion(ctx, out)
	return out
}

// etcdLogTail returns the end of the etcd member's log, for error reports.
func (e *Env) etcdLogTail() string {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(e.etcd.Members[0].Dir), "etcd.log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
