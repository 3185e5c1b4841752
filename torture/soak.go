package torture

// The steady-state soak (issue 31, item 4). One distlock Client per
// backend (Redis and etcd, each a server of package testserver) acquires
// many locks and holds them while its watchdog renews them (every TTL/3,
// batched); the backends are soaked at once, in this process. Every
// interval, after a GC, the soak samples what a leak would grow: the
// process's goroutines, heap in use and socket descriptors (from
// /proc/self/fd), its TCP connections to each server (/proc/self/net/tcp),
// the server's socket descriptors (/proc/PID/fd) and, on Redis, its
// connected_clients (INFO clients). It counts the renewals confirmed and
// failed (from the Client's log records) and the locks lost (a lock
// context that ends before its release). Trends fits each metric by least
// squares after a warm-up; SoakFlat defines "flat". The test TestSoak runs
// it with -soak.duration and writes SOAK.md; TestSoakShort, in CI, checks
// only what cannot flake: no renewal failed, no lock lost, the goroutines
// back to their count once the soak is over.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/testserver"
)

// SoakConfig sizes a steady-state soak of one backend or several at once.
type SoakConfig struct {
	// Targets are the services, each of Kind "redis" or "etcd": each gets
	// a Client of its own, and all are filled, sampled and released
	// together.
	Targets []Target
	// Locks is how many locks each Client acquires and holds.
	Locks int
	// TTL is the locks' TTL; they are renewed every TTL/3 (the default).
	TTL time.Duration
	// Duration is how long the locks are held once all are acquired.
	Duration time.Duration
	// Interval is the time between samples; the first is taken when every
	// lock is held, the last at Duration.
	Interval time.Duration
	// Warmup is left out of the trends: samples taken before it (counted
	// from the first sample) show the process settling, not a leak.
	Warmup time.Duration
	// Logf, if set, reports each sample as it is taken.
	Logf func(format string, args ...any)
}

// SoakSample is one sample of a soak's backend. Goroutines, HeapInuse
// and Sockets are the whole process's, read once per sample for every
// backend soaked at once: they include every backend's Client.
type SoakSample struct {
	At         time.Duration // since every lock was held
	Goroutines int           // runtime.NumGoroutine
	HeapInuse  uint64        // runtime.MemStats.HeapInuse, read after a GC
	Sockets    int           // the process's descriptors of type socket
	// ToServer is how many of the process's TCP sockets are connected to
	// the service's client ports (read from /proc/net/tcp and tcp6).
	ToServer int
	// ServerSockets is how many descriptors of type socket the server
	// process has (its listeners included).
	ServerSockets int
	// ServerClients is Redis's connected_clients (INFO clients), less the
	// sampler's own connection; -1 on etcd, which reports no such count.
	ServerClients int
	Held          int   // locks whose Err is nil
	RenewalsOK    int64 // renewals confirmed so far
	RenewalsFail  int64 // renewals failed so far
}

// SoakResult is what a soak measured on one backend.
type SoakResult struct {
	Kind       string
	Locks      int
	TTL        time.Duration
	RenewEvery time.Duration
	Duration   time.Duration
	Warmup     time.Duration
	Acquiring  time.Duration // the time to acquire every lock
	Samples    []SoakSample
	// RenewalsOK and RenewalsFailed count the Client's renewals over the
	// whole soak (its Debug "renewed" and Warn "refresh failed" records).
	RenewalsOK     int64
	RenewalsFailed int64
	// AtRisk counts the Client's "lock at risk" warnings.
	AtRisk int64
	// Lost counts locks whose context ended before their release.
	Lost int64
	// Failures are the first failures and losses, for the report.
	Failures []string
}

// soakWorkers is how many acquisitions (and releases) of one backend run
// at once.
const soakWorkers = 32

// soakURL is the backend URL of a soak: the target's, with timeouts long
// enough that a loaded machine does not fail a renewal.
func soakURL(tg Target) (string, error) {
	switch tg.Kind {
	case backendRedis:
		return "redis://" + tg.Redis.Addr + "/0?dial_timeout=5s&read_timeout=5s&write_timeout=5s", nil
	case backendEtcd:
		return "etcd://" + strings.Join(tg.addrs(), ",") + "?dial_timeout=5s&request_timeout=5s", nil
	}
	return "", fmt.Errorf("torture: soak: backend %q is not soaked (redis or etcd)", tg.Kind)
}

// soakLog counts the Client's log records that a soak reports.
type soakLog struct {
	ok, failed, atRisk atomic.Int64
	mu                 sync.Mutex
	failures           []string
}

const soakMaxFailures = 10

func (h *soakLog) note(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.failures) < soakMaxFailures {
		h.failures = append(h.failures, s)
	}
}

func (h *soakLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *soakLog) Handle(_ context.Context, r slog.Record) error {
	switch r.Message {
	case "distlock: renewed":
		h.ok.Add(1)
	case "distlock: refresh failed":
		h.failed.Add(1)
		h.note(recordString(r))
	case "distlock: lock at risk":
		h.atRisk.Add(1)
		h.note(recordString(r))
	case "distlock: lock lost":
		h.note(recordString(r))
	}
	return nil
}

func (h *soakLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *soakLog) WithGroup(string) slog.Handler      { return h }

func recordString(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Time.Format("15:04:05.000 "))
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	return b.String()
}

// soaked is one backend of a soak.
type soaked struct {
	cfg    *SoakConfig
	tg     Target
	res    *SoakResult
	b      driver.Backend
	closer interface{ Close() error }
	server *testserver.Process
	rdb    *redis.Client // Redis: the sampler's connection
	ports  []int
	log    *soakLog
	c      *distlock.Client
	locks  []*distlock.Lock
	stops  []func() bool // each lock's AfterFunc's stop
	lost   atomic.Int64
}

// Soak acquires cfg.Locks locks on each of cfg.Targets, with a Client per
// target, holds them for cfg.Duration while the Clients renew them, samples
// the process and the servers every cfg.Interval, then releases the locks
// and closes the Clients and the backends. It returns a result per
// target, or an error if the soak could not run (a backend that does not
// open, a lock not acquired, a release that fails); renewal failures and
// losses are counted in the results.
func Soak(ctx context.Context, cfg SoakConfig) ([]*SoakResult, error) {
	if len(cfg.Targets) == 0 || cfg.Locks < 1 || cfg.TTL <= 0 || cfg.Duration <= 0 || cfg.Interval <= 0 {
		return nil, fmt.Errorf("torture: soak: %d targets, locks %d, TTL %v, duration %v and interval %v must be positive", len(cfg.Targets), cfg.Locks, cfg.TTL, cfg.Duration, cfg.Interval)
	}
	var ss []*soaked
	defer func() {
		for _, s := range ss {
			s.close(ctx)
		}
	}()
	for _, tg := range cfg.Targets {
		s := &soaked{cfg: &cfg, tg: tg}
		ss = append(ss, s) // closed by the defer, whatever open did
		if err := s.open(ctx); err != nil {
			return nil, err
		}
	}
	errs := make([]error, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() { errs[i] = s.fill(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	// Hold, and sample.
	held := time.Now()
	sample := func() error {
		at := time.Since(held).Round(time.Second)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		p := SoakSample{At: at, HeapInuse: ms.HeapInuse, Goroutines: runtime.NumGoroutine()}
		for _, s := range ss {
			if err := s.sample(ctx, p); err != nil {
				return err
			}
		}
		return nil
	}
	if err := sample(); err != nil {
		return nil, err
	}
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	end := held.Add(cfg.Duration)
	for time.Now().Before(end) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		if err := sample(); err != nil {
			return nil, err
		}
	}

	for i, s := range ss {
		wg.Go(func() { errs[i] = s.release(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var rs []*SoakResult
	for _, s := range ss {
		rs = append(rs, s.res)
	}
	return rs, nil
}

// open opens s's backend and Client.
func (s *soaked) open(ctx context.Context) error {
	u, err := soakURL(s.tg)
	if err != nil {
		return err
	}
	switch s.tg.Kind {
	case backendRedis:
		rb, err := redislock.OpenURL(ctx, u)
		if err != nil {
			return err
		}
		s.b, s.closer, s.server = rb, rb, s.tg.Redis.Process
		s.rdb = redis.NewClient(&redis.Options{Addr: s.tg.Redis.Addr, PoolSize: 1, ReadTimeout: 5 * time.Second})
	case backendEtcd:
		eb, err := etcdlock.OpenURL(ctx, u)
		if err != nil {
			return err
		}
		s.b, s.closer, s.server = eb, eb, s.tg.Etcd.Members[0].Process
	}
	for _, a := range s.tg.addrs() {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return err
		}
		s.ports = append(s.ports, n)
	}
	s.log = &soakLog{}
	s.c, err = distlock.New(s.b, distlock.WithTTL(s.cfg.TTL), distlock.WithOwner("soak"), distlock.WithLogger(slog.New(s.log)))
	if err != nil {
		return err
	}
	s.res = &SoakResult{Kind: s.tg.Kind, Locks: s.cfg.Locks, TTL: s.cfg.TTL, RenewEvery: s.cfg.TTL / 3, Duration: s.cfg.Duration, Warmup: s.cfg.Warmup}
	return nil
}

// close closes what open opened (the Client releases the locks still
// held); a soak that ran to its end has closed them already.
func (s *soaked) close(ctx context.Context) {
	if s.c != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		_ = s.c.Close(cctx)
		cancel()
	}
	if s.closer != nil {
		_ = s.closer.Close()
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
}

// fill acquires the locks, soakWorkers at once.
func (s *soaked) fill(ctx context.Context) error {
	start := time.Now()
	n := s.cfg.Locks
	s.locks = make([]*distlock.Lock, n)
	s.stops = make([]func() bool, n)
	err := parallel(n, func(i int) error {
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		l, err := s.c.Acquire(actx, fmt.Sprintf("soak/%s/%d", s.tg.Kind, i))
		cancel()
		if err != nil {
			return fmt.Errorf("torture: soak: %s: acquire: %w", s.tg.Kind, err)
		}
		s.locks[i] = l
		s.stops[i] = context.AfterFunc(l.Context(), func() {
			s.lost.Add(1)
			s.log.note(fmt.Sprintf("%s (token %d) ended while held: %v", l.Key(), l.Token(), context.Cause(l.Context())))
		})
		return nil
	})
	s.res.Acquiring = time.Since(start)
	return err
}

// parallel runs f(0) to f(n-1), soakWorkers at once, and returns the first
// error; after one, the calls not yet started are not made.
func parallel(n int, f func(i int) error) error {
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	next := make(chan int)
	for range soakWorkers {
		wg.Go(func() {
			for i := range next {
				mu.Lock()
				failed := first != nil
				mu.Unlock()
				if failed {
					continue
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// sample appends a sample of s, with p's process-wide fields.
func (s *soaked) sample(ctx context.Context, p SoakSample) error {
	p.RenewalsOK, p.RenewalsFail = s.log.ok.Load(), s.log.failed.Load()
	for _, l := range s.locks {
		if l.Err() == nil {
			p.Held++
		}
	}
	var err error
	if p.Sockets, p.ToServer, err = socketsTo(s.ports); err != nil {
		return err
	}
	if p.ServerSockets, err = procSockets(s.server.Pid()); err != nil {
		return err
	}
	p.ServerClients = -1
	if s.rdb != nil {
		if p.ServerClients, err = redisClients(ctx, s.rdb); err != nil {
			return err
		}
	}
	s.res.Samples = append(s.res.Samples, p)
	if s.cfg.Logf != nil {
		s.cfg.Logf("soak %s %v: held %d, goroutines %d, heap %.1f MiB, sockets %d (%d to the server), server sockets %d, server clients %d, renewals %d ok %d failed",
			s.res.Kind, p.At, p.Held, p.Goroutines, float64(p.HeapInuse)/(1<<20), p.Sockets, p.ToServer, p.ServerSockets, p.ServerClients, p.RenewalsOK, p.RenewalsFail)
	}
	return nil
}

// release releases the locks, soakWorkers at once (a lock whose context
// had ended is counted lost), and closes the Client and the backend.
func (s *soaked) release(ctx context.Context) error {
	var (
		mu   sync.Mutex
		errs []error
	)
	_ = parallel(len(s.locks), func(i int) error {
		if !s.stops[i]() {
			return nil // counted by its AfterFunc
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := s.locks[i].Release(rctx)
		cancel()
		if err != nil {
			mu.Lock()
			errs = append(errs, fmt.Errorf("torture: soak: %s: release %s: %w", s.tg.Kind, s.locks[i].Key(), err))
			mu.Unlock()
		}
		return nil
	})
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.c.Close(cctx); err != nil {
		errs = append(errs, fmt.Errorf("torture: soak: %s: close: %w", s.tg.Kind, err))
	}
	s.c = nil
	if err := s.closer.Close(); err != nil {
		errs = append(errs, fmt.Errorf("torture: soak: %s: close the backend: %w", s.tg.Kind, err))
	}
	s.closer = nil
	r := s.res
	r.RenewalsOK, r.RenewalsFailed, r.AtRisk, r.Lost = s.log.ok.Load(), s.log.failed.Load(), s.log.atRisk.Load(), s.lost.Load()
	s.log.mu.Lock()
	r.Failures = s.log.failures
	s.log.mu.Unlock()
	return errors.Join(errs...)
}

// redisClients returns connected_clients of INFO clients, less rdb's own
// connection.
func redisClients(ctx context.Context, rdb *redis.Client) (int, error) {
	info, err := rdb.Info(ctx, "clients").Result()
	if err != nil {
		return 0, fmt.Errorf("torture: soak: INFO clients: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			n, err := strconv.Atoi(v)
			return n - 1, err
		}
	}
	return 0, errors.New("torture: soak: INFO clients has no connected_clients")
}

// socketInodes returns the inodes of the sockets among the descriptors of
// process pid ("self" for this one).
func socketInodes(pid string) (map[string]bool, error) {
	dir := filepath.Join("/proc", pid, "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	ino := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since ReadDir
		}
		if s, ok := strings.CutPrefix(l, "socket:["); ok {
			ino[strings.TrimSuffix(s, "]")] = true
		}
	}
	return ino, nil
}

// procSockets returns how many descriptors of process pid are sockets.
func procSockets(pid int) (int, error) {
	if pid == 0 {
		return 0, errors.New("torture: soak: the server is not running")
	}
	ino, err := socketInodes(strconv.Itoa(pid))
	return len(ino), err
}

// socketsTo returns how many descriptors of this process are sockets, and
// how many of those are TCP connections to one of ports on loopback.
func socketsTo(ports []int) (all, to int, err error) {
	ino, err := socketInodes("self")
	if err != nil {
		return 0, 0, err
	}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		n, err := countTCP(f, ino, ports)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, 0, err
		}
		to += n
	}
	return len(ino), to, nil
}

// countTCP counts the lines of a /proc/net/tcp file whose inode is in ino
// and whose remote port is one of ports.
func countTCP(path string, ino map[string]bool, ports []int) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || !ino[fs[9]] {
			continue
		}
		_, hexPort, ok := strings.Cut(fs[2], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			continue
		}
		for _, want := range ports {
			if int(p) == want {
				n++
			}
		}
	}
	return n, sc.Err()
}

// SoakTrend is the trend of one metric over a soak's samples after its
// warm-up.
type SoakTrend struct {
	Metric string
	N      int     // samples used
	Mean   float64 // their mean
	First  float64 // the first and last used
	Last   float64
	// Slope is the least-squares slope, per minute.
	Slope float64
	// Rel is Slope times the span of the samples used, over Mean: the
	// growth the fit shows over the soak, relative to the level.
	Rel float64
	// Monotone is set when the samples never fall and rise at least
	// three times: a steady climb, whatever its size.
	Monotone bool
	// Verdict is "flat", "grows" or "falls" (see SoakFlat).
	Verdict string
}

// SoakFlat is the bound on a trend's Rel for the verdict "flat": the
// fitted growth over the soak is under 5% of the metric's mean, and the
// samples do not climb monotonically. "grows" is a Rel of 5% or more, or
// a monotone climb; "falls" a Rel of -5% or less.
const SoakFlat = 0.05

// Trends returns the trend of each metric after the warm-up.
func (r *SoakResult) Trends() []SoakTrend {
	var used []SoakSample
	if len(r.Samples) > 0 {
		t0 := r.Samples[0].At
		for _, s := range r.Samples {
			if s.At-t0 >= r.Warmup {
				used = append(used, s)
			}
		}
	}
	metrics := []struct {
		name string
		get  func(SoakSample) float64
	}{
		{"goroutines (process)", func(s SoakSample) float64 { return float64(s.Goroutines) }},
		{"heap in use, MiB (process)", func(s SoakSample) float64 { return float64(s.HeapInuse) / (1 << 20) }},
		{"sockets (process)", func(s SoakSample) float64 { return float64(s.Sockets) }},
		{"sockets to the server", func(s SoakSample) float64 { return float64(s.ToServer) }},
		{"server sockets", func(s SoakSample) float64 { return float64(s.ServerSockets) }},
	}
	if r.Kind == backendRedis {
		metrics = append(metrics, struct {
			name string
			get  func(SoakSample) float64
		}{"server connected_clients", func(s SoakSample) float64 { return float64(s.ServerClients) }})
	}
	var ts []SoakTrend
	for _, m := range metrics {
		xs := make([]float64, len(used))
		ys := make([]float64, len(used))
		for i, s := range used {
			xs[i], ys[i] = s.At.Minutes(), m.get(s)
		}
		ts = append(ts, trend(m.name, xs, ys))
	}
	return ts
}

// trend fits ys over xs (minutes) by least squares.
func trend(name string, xs, ys []float64) SoakTrend {
	t := SoakTrend{Metric: name, N: len(xs), Verdict: "too few samples"}
	if len(xs) < 3 {
		return t
	}
	n := float64(len(xs))
	var sx, sy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
	}
	mx, my := sx/n, sy/n
	var sxy, sxx float64
	rises := 0
	t.Monotone = true
	for i := range xs {
		sxy += (xs[i] - mx) * (ys[i] - my)
		sxx += (xs[i] - mx) * (xs[i] - mx)
		if i > 0 {
			switch {
			case ys[i] < ys[i-1]:
				t.Monotone = false
			case ys[i] > ys[i-1]:
				rises++
			}
		}
	}
	t.Monotone = t.Monotone && rises >= 3
	t.Mean, t.First, t.Last = my, ys[0], ys[len(ys)-1]
	if sxx > 0 {
		t.Slope = sxy / sxx
	}
	span := xs[len(xs)-1] - xs[0]
	switch {
	case my != 0:
		t.Rel = t.Slope * span / math.Abs(my)
	case t.Slope != 0:
		t.Rel = math.Inf(int(math.Copysign(1, t.Slope)))
	}
	switch {
	case t.Rel >= SoakFlat || t.Monotone:
		t.Verdict = "grows"
	case t.Rel <= -SoakFlat:
		t.Verdict = "falls"
	default:
		t.Verdict = "flat"
	}
	return t
}

// WriteSoak writes the soaks' tables, as markdown, to path; command is the
// command that ran them.
func WriteSoak(path string, rs []*SoakResult, command string) error {
	var b strings.Builder
	b.WriteString("# Steady-state soak\n\n")
	b.WriteString("Written by `" + command + "` (issue 31, item 4): one distlock Client per backend holds\n")
	b.WriteString("its locks and renews them (every TTL/3, batched by the watchdog) for the whole soak, both backends\n")
	b.WriteString("at once in one process, each against a server started by package testserver. Every sample is\n")
	b.WriteString("taken after a GC. Goroutines, heap and process sockets are the whole process's, so they are the\n")
	b.WriteString("sum of both soaks; the sockets to the server and the server's counts are each backend's own.\n")
	fmt.Fprintf(&b, "Go %s, GOMAXPROCS %d.\n\n", runtime.Version(), runtime.GOMAXPROCS(0))
	b.WriteString("The trend of a metric is the least-squares slope over the samples after the warm-up, per minute,\n")
	fmt.Fprintf(&b, "and relative: the slope times the span of those samples over their mean. **flat** (no leak) is a\n")
	fmt.Fprintf(&b, "relative growth under %.0f%% and no monotone climb (samples that never fall and rise at least three\n", SoakFlat*100)
	b.WriteString("times); **grows** is a relative growth of 5% or more, or a monotone climb; **falls** is -5% or less.\n")
	b.WriteString("A constant count (goroutines, sockets) has slope 0. The bound is meant to catch a leak per renewal,\n")
	b.WriteString("per lock or per minute (it would grow every sample), not noise in the heap after a GC.\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "\n## %s\n\n", r.Kind)
		perSec := float64(r.Locks) / r.RenewEvery.Seconds()
		fmt.Fprintf(&b, "%d locks, TTL %v, renewed every %v (%.0f renewals/s), held %v after %v of acquiring; warm-up %v.\n",
			r.Locks, r.TTL, r.RenewEvery.Round(time.Millisecond), perSec, r.Duration, r.Acquiring.Round(time.Millisecond), r.Warmup)
		fmt.Fprintf(&b, "Renewals: %d confirmed, **%d failed**; **%d locks lost**; %d at-risk warnings.\n\n", r.RenewalsOK, r.RenewalsFailed, r.Lost, r.AtRisk)
		b.WriteString("| at | held | goroutines | heap in use (MiB) | process sockets | sockets to the server | server sockets | server clients | renewals ok | renewals failed |\n")
		b.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, s := range r.Samples {
			clients := "-"
			if s.ServerClients >= 0 {
				clients = strconv.Itoa(s.ServerClients)
			}
			fmt.Fprintf(&b, "| %v | %d | %d | %.1f | %d | %d | %d | %s | %d | %d |\n",
				s.At, s.Held, s.Goroutines, float64(s.HeapInuse)/(1<<20), s.Sockets, s.ToServer, s.ServerSockets, clients, s.RenewalsOK, s.RenewalsFail)
		}
		b.WriteString("\n| metric | samples | mean | first | last | slope per minute | relative | monotone | verdict |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---|---|\n")
		for _, t := range r.Trends() {
			fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f | %.2f | %+.4f | %+.2f%% | %v | **%s** |\n",
				t.Metric, t.N, t.Mean, t.First, t.Last, t.Slope, t.Rel*100, t.Monotone, t.Verdict)
		}
		if len(r.Failures) > 0 {
			b.WriteString("\nFirst failures:\n\n")
			for _, f := range r.Failures {
				b.WriteString("- `" + f + "`\n")
			}
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
