package torture

import (
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/faultproxy"
	"github.com/distlock/distlock/testserver"
)

// Target is the lock service a scenario runs against.
type Target struct {
	Kind  string            // "redis", "redlock", "etcd", "file", "zookeeper", "postgres" or "gateway"
	Redis *testserver.Redis // redis: the server
	// Redlock are the independent servers of a redlock target.
	Redlock []*testserver.Redis
	// RedlockOptions are parameters added to the workers' redlock URL
	// ("name=value&...", e.g. max_ttl).
	RedlockOptions string
	Etcd           *testserver.Etcd      // etcd: the cluster
	Dir            string                // file: the lock directory
	ZK             *testserver.ZooKeeper // zookeeper: the ensemble
	PG             *testserver.Postgres  // postgres: the lock server
	// Gateway is the gateway (kind gateway), served by the harness.
	Gateway *Gateway
	// PGSession are parameters added to the workers' PostgreSQL URL
	// ("name=value&..."): settings of their sessions, or pglock's own
	// (mode=lease).
	PGSession string
	// Data is the PostgreSQL server that keeps the data of a store fenced
	// by pglock.Fence; it stays up when a scenario restarts PG.
	Data *testserver.Postgres
}

// addrs returns the client addresses of the lock service.
func (tg Target) addrs() []string {
	switch tg.Kind {
	case backendRedis:
		return []string{tg.Redis.Addr}
	case backendEtcd:
		var a []string
		for _, m := range tg.Etcd.Members {
			a = append(a, m.ClientAddr)
		}
		return a
	case backendZK:
		return tg.ZK.Servers
	case backendPG:
		return []string{fmt.Sprintf("127.0.0.1:%d", tg.PG.Port)}
	case backendGateway:
		return []string{tg.Gateway.Addr}
	case backendRedlock:
		return redlockAddrs(tg.Redlock)
	}
	return nil
}

// URL returns the backend URL reaching the service at addrs (the service's
// own addresses when addrs is empty).
func (tg Target) URL(addrs ...string) string {
	if len(addrs) == 0 {
		addrs = tg.addrs()
	}
	switch tg.Kind {
	case backendRedis:
		return "redis://" + addrs[0] + "/0?dial_timeout=2s&read_timeout=2s&write_timeout=2s"
	case backendEtcd:
		return "etcd://" + strings.Join(addrs, ",") + "?dial_timeout=2s&request_timeout=2s"
	case backendFile:
		return (&url.URL{Scheme: "file", Path: tg.Dir}).String()
	case backendZK:
		return zkURL(addrs)
	case backendPG:
		return pgURL(addrs[0], tg.PGSession)
	case backendGateway:
		return gatewayURL(addrs[0])
	case backendRedlock:
		return redlockURL(addrs, tg.RedlockOptions)
	}
	return ""
}

// Params size a scenario.
type Params struct {
	Rounds int           // fault rounds per run
	Warm   int           // lock/increment/release cycles per worker before each round
	TTL    time.Duration // lock TTL of the workers (scenarios may lengthen it)
	Full   bool          // the long run
}

// Fixture is what a scenario function works with: one Run, its target, the
// lock key and the store resource.
type Fixture struct {
	T      testing.TB
	Run    *Run
	Target Target
	P      Params
	Key    string
	Res    string
	Res0   *Result // the result being filled: scenarios set Orphans and notes
	// Election makes every worker a candidate in the election named Key
	// (see OpenOptions.Election), and the first Workers call spawns an
	// observer of it as well.
	Election bool
	// Permit makes every worker acquire permits (see OpenOptions.Permit).
	Permit bool
	// RW makes every worker's grants locks of the read/write lock named
	// Key (see OpenOptions.RW).
	RW bool
	// readers, in a read/write row, hold read locks between the writers'
	// grants (see holdAfterReaders).
	readers  []*Worker
	probe    *Worker
	observer *Worker
}

// WorkerConfig configures a worker spawned by a Fixture.
type WorkerConfig struct {
	LockVia    *faultproxy.Proxy // reach the lock service through this proxy
	StoreVia   *faultproxy.Proxy // reach the store through this proxy
	URL        string            // a backend URL of its own (overrides LockVia)
	TTL        time.Duration     // default: the Params' TTL
	RenewEvery time.Duration     // default: TTL/3
}

// Drift and SafetyMargin of every worker's Client: generous, so that the
// local deadline stays ahead of the service's expiry on a loaded machine.
const (
	workerDrift  = 0.1
	workerMargin = 50 * time.Millisecond
)

// Worker spawns a worker and opens its backend and store connection.
func (f *Fixture) Worker(name string, c WorkerConfig) *Worker {
	f.T.Helper()
	return f.Workers(map[string]WorkerConfig{name: c})[name]
}

// Workers spawns and opens several workers at once (a worker process
// takes a noticeable time to start).
func (f *Fixture) Workers(cfgs map[string]WorkerConfig) map[string]*Worker {
	f.T.Helper()
	observe := f.Election && f.observer == nil
	if observe {
		cfgs = maps.Clone(cfgs)
		cfgs[observerName] = WorkerConfig{}
	}
	type result struct {
		name string
		w    *Worker
		err  error
	}
	ch := make(chan result, len(cfgs))
	for name, c := range cfgs {
		go func() {
			w, err := f.open(name, c)
			ch <- result{name, w, err}
		}()
	}
	ws := map[string]*Worker{}
	var errs []error
	for range cfgs {
		r := <-ch
		if r.err != nil {
			errs = append(errs, r.err)
		}
		ws[r.name] = r.w
	}
	if len(errs) > 0 {
		f.T.Fatal(errors.Join(errs...))
	}
	if observe {
		f.observer = ws[observerName]
		delete(ws, observerName)
		if err := f.observer.Observe(f.Key); err != nil {
			f.T.Fatal(err)
		}
	}
	return ws
}

func (f *Fixture) open(name string, c WorkerConfig) (*Worker, error) {
	w, err := f.Run.spawn(name)
	if err != nil {
		return nil, err
	}
	u := c.URL
	if u == "" {
		if c.LockVia != nil {
			u = f.Target.URL(c.LockVia.Addr())
		} else {
			u = f.Target.URL()
		}
	}
	store := f.Run.Store.Addr()
	if c.StoreVia != nil {
		store = c.StoreVia.Addr()
	}
	if c.TTL == 0 {
		c.TTL = f.P.TTL
	}
	err = w.Open(OpenOptions{Backend: f.Target.Kind, URL: u, TTL: c.TTL, Drift: workerDrift, Margin: workerMargin, RenewEvery: c.RenewEvery,
		Election: f.Election, Permit: f.Permit, RW: f.RW}, store)
	if err != nil {
		return nil, fmt.Errorf("torture: open worker %s: %w\n%s", name, err, w.LogTail())
	}
	return w, nil
}

// release has w give its lock back. A lock lost before its release is no
// failure of the run: under a fault, or on a machine stalled past a TTL,
// any holder may lose its lock, and the library saying so is what it must
// do; the history (the grant's end, the release's outcome) lets the
// checkers judge it. The loss is noted; any other error is returned.
//
// In an election row a term still live is held until the observer has
// reported it, at most 30s (an observer error if not): Observe reports
// states, so a term that ends before Observe reads it is skipped, and only
// a term held until seen makes "the observer receives the term a round
// ends with" something it can fail.
func (f *Fixture) release(w *Worker) error {
	if f.observer != nil {
		if tok, live := w.holdingLive(); live && !f.waitObserved(tok, 30*time.Second) {
			f.Res0.ObserveViolations++
			f.Run.Notef("observer error: %s's term %d not reported within 30s", w.Name, tok)
		}
	}
	return f.releaseNow(w)
}

// releaseNow releases w's lock, a lost lock being no error.
func (f *Fixture) releaseNow(w *Worker) error {
	err := w.Release()
	if ErrKind(err) == kindLost {
		f.Run.Notef("%s's release: its lock had been lost (%v)", w.Name, err)
		return nil
	}
	return err
}

// Warm runs the steady workload: each worker loops acquire, increment,
// release, concurrently, n times.
// warmThenHold warms holder and others, then has holder take the key and
// write the resource once with its token, which it returns.
func (f *Fixture) warmThenHold(holder *Worker, others ...*Worker) (uint64, error) {
	if err := f.Warm(append([]*Worker{holder}, others...)...); err != nil {
		return 0, err
	}
	tok, err := f.holdAfterReaders(holder)
	if err != nil {
		return 0, err
	}
	if res := holder.RMW(f.Res, RMWOptions{}); res.Err != nil {
		return 0, res.Err
	}
	return tok, nil
}

func (f *Fixture) Warm(ws ...*Worker) error {
	errs := make(chan error, len(ws))
	for _, w := range ws {
		go func() {
			for range f.P.Warm {
				if _, err := w.Acquire(f.Key, Acq{Wait: true}); err != nil {
					errs <- err
					return
				}
				if res := w.RMW(f.Res, RMWOptions{}); res.Err != nil {
					errs <- res.Err
					return
				}
				// Not held until observed: the warm-up's terms come and go
				// at the workload's pace.
				if err := f.releaseNow(w); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range ws {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Eventually polls cond until it is true or d passes; it returns false on
// timeout.
func Eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	return true
}

// redisInt reads an integer key from srv (0 if missing).
func redisInt(srv *testserver.Redis, key string) (int64, error) {
	v, err := srv.Do("GET", key)
	if err != nil || v == nil {
		return 0, err
	}
	s, _ := v.(string)
	return strconv.ParseInt(s, 10, 64)
}

// redisLockToken returns the token stored in key's lock at srv, and whether
// the lock exists.
func redisLockToken(srv *testserver.Redis, key string) (uint64, bool, error) {
	v, err := srv.Do("GET", RedisLockKey(key))
	if err != nil || v == nil {
		return 0, false, err
	}
	s, _ := v.(string)
	parts := strings.Split(s, "|")
	if len(parts) < 2 {
		return 0, true, nil // not a redislock grant (a naive one)
	}
	t, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return 0, true, nil // not a redislock grant (a naive one)
	}
	return t, true, nil
}

// EtcdLockName is the etcd lock name of a lock taken by etcdlock with the
// default prefix, per the documented layout (etcdlock's Backend.KeyPath):
// the prefix, then the key with "%" written "%25" and "/" written "%2F".
func EtcdLockName(key string) string {
	return etcdlock.DefaultPrefix + strings.NewReplacer("%", "%25", "/", "%2F").Replace(key)
}

// etcdKeys returns the create revisions of the keys under key's lock name
// (default prefix) in the cluster, through the JSON gateway.
func etcdKeys(e *testserver.Etcd, key string) ([]int64, error) {
	name := EtcdLockName(key) + "/"
	end := []byte(name)
	end[len(end)-1]++
	in := map[string]string{
		"key":       base64.StdEncoding.EncodeToString([]byte(name)),
		"range_end": base64.StdEncoding.EncodeToString(end),
	}
	var out struct {
		Kvs []struct {
			CreateRevision string `json:"create_revision"`
		} `json:"kvs"`
	}
	var err error
	for _, m := range e.Members {
		if !m.Running() {
			continue
		}
		if err = m.Post("/v3/kv/range", in, &out); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	revs := make([]int64, 0, len(out.Kvs))
	for _, kv := range out.Kvs {
		r, err := strconv.ParseInt(kv.CreateRevision, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("create_revision %q: %w", kv.CreateRevision, err)
		}
		revs = append(revs, r)
	}
	return revs, nil
}
