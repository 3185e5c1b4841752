package torture

// The steady-state soak (issue 31, item 4): many locks held and renewed by
// one Client for a long time, with the resources a leak would grow
// sampled at intervals. See SoakConfig and the Soak section of the package
// doc.

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

// SoakConfig sizes a steady-state soak of one backend.
type SoakConfig struct {
	// Target is the service: Kind "redis" or "etcd".
	Target Target
	// Locks is how many locks the one Client acquires and holds.
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

// SoakSample is one sample of a soak. Goroutines, HeapInuse and Sockets
// are the whole process's: when soaks of two backends run at once, they
// include both.
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

// SoakResult is what a soak measured.
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

// soakWorkers is how many acquisitions run at once while the soak fills.
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
	ok, failed, atRisk, lost atomic.Int64
	mu                       sync.Mutex
	failures                 []string
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

// Soak acquires cfg.Locks locks on cfg.Target with one Client, holds them
// for cfg.Duration while the Client renews them, samples the process and
// the server every cfg.Interval, then releases the locks and closes the
// Client and the backend. It returns an error if the soak could not run
// (a backend that does not open, a lock not acquired, a release that
// fails); renewal failures and losses are counted in the result.
func Soak(ctx context.Context, cfg SoakConfig) (*SoakResult, error) {
	if cfg.Locks < 1 || cfg.TTL <= 0 || cfg.Duration <= 0 || cfg.Interval <= 0 {
		return nil, fmt.Errorf("torture: soak: locks %d, TTL %v, duration %v and interval %v must be positive", cfg.Locks, cfg.TTL, cfg.Duration, cfg.Interval)
	}
	u, err := soakURL(cfg.Target)
	if err != nil {
		return nil, err
	}
	var (
		b      driver.Backend
		closer interface{ Close() error }
		server *testserver.Process
		rdb    *redis.Client
	)
	switch cfg.Target.Kind {
	case backendRedis:
		rb, err := redislock.OpenURL(ctx, u)
		if err != nil {
			return nil, err
		}
		b, closer, server = rb, rb, cfg.Target.Redis.Process
		rdb = redis.NewClient(&redis.Options{Addr: cfg.Target.Redis.Addr, PoolSize: 1, ReadTimeout: 5 * time.Second})
		defer rdb.Close()
	case backendEtcd:
		eb, err := etcdlock.OpenURL(ctx, u)
		if err != nil {
			return nil, err
		}
		b, closer, server = eb, eb, cfg.Target.Etcd.Members[0].Process
	}
	defer closer.Close()
	var ports []int
	for _, a := range cfg.Target.addrs() {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			return nil, err
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, err
		}
		ports = append(ports, n)
	}

	h := &soakLog{}
	c, err := distlock.New(b, distlock.WithTTL(cfg.TTL), distlock.WithOwner("soak"), distlock.WithLogger(slog.New(h)))
	if err != nil {
		return nil, err
	}
	res := &SoakResult{Kind: cfg.Target.Kind, Locks: cfg.Locks, TTL: cfg.TTL, RenewEvery: cfg.TTL / 3, Duration: cfg.Duration, Warmup: cfg.Warmup}
	locks := make([]*distlock.Lock, cfg.Locks)
	stops := make([]func() bool, cfg.Locks)
	var lost atomic.Int64
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = c.Close(cctx) // releases what an early return left held
	}()

	// Fill: soakWorkers acquisitions at once.
	start := time.Now()
	next := make(chan int)
	errs := make(chan error, soakWorkers)
	var wg sync.WaitGroup
	for range soakWorkers {
		wg.Go(func() {
			for i := range next {
				actx, cancel := context.WithTimeout(ctx, time.Minute)
				l, err := c.Acquire(actx, fmt.Sprintf("soak/%s/%d", cfg.Target.Kind, i))
				cancel()
				if err != nil {
					errs <- err
					for range next { // drain
					}
					return
				}
				locks[i] = l
				stops[i] = context.AfterFunc(l.Context(), func() {
					lost.Add(1)
					h.note(fmt.Sprintf("lock %d (%s, token %d) ended while held: %v", i, l.Key(), l.Token(), context.Cause(l.Context())))
				})
			}
		})
	}
	for i := range cfg.Locks {
		select {
		case next <- i:
			continue
		case err := <-errs:
			close(next)
			wg.Wait()
			return nil, fmt.Errorf("torture: soak: acquire: %w", err)
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, fmt.Errorf("torture: soak: acquire: %w", err)
	default:
	}
	res.Acquiring = time.Since(start)

	// Hold, and sample.
	held := time.Now()
	sample := func() error {
		s := SoakSample{At: time.Since(held).Round(time.Second), RenewalsOK: h.ok.Load(), RenewalsFail: h.failed.Load()}
		for _, l := range locks {
			if l.Err() == nil {
				s.Held++
			}
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.HeapInuse = ms.HeapInuse
		s.Goroutines = runtime.NumGoroutine()
		var err error
		if s.Sockets, s.ToServer, err = socketsTo(ports); err != nil {
			return err
		}
		if s.ServerSockets, err = procSockets(server.Pid()); err != nil {
			return err
		}
		s.ServerClients = -1
		if rdb != nil {
			if s.ServerClients, err = redisClients(ctx, rdb); err != nil {
				return err
			}
		}
		res.Samples = append(res.Samples, s)
		if cfg.Logf != nil {
			cfg.Logf("soak %s %v: held %d, goroutines %d, heap %.1f MiB, sockets %d (%d to the server), server sockets %d, server clients %d, renewals %d ok %d failed",
				res.Kind, s.At, s.Held, s.Goroutines, float64(s.HeapInuse)/(1<<20), s.Sockets, s.ToServer, s.ServerSockets, s.ServerClients, s.RenewalsOK, s.RenewalsFail)
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

	// Release, soakWorkers at once: a lock whose context had ended is
	// counted lost.
	var (
		relMu  sync.Mutex
		relErr error
	)
	rel := make(chan int)
	for range soakWorkers {
		wg.Go(func() {
			for i := range rel {
				if !stops[i]() {
					continue // counted by its AfterFunc
				}
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				err := locks[i].Release(rctx)
				cancel()
				if err != nil {
					relMu.Lock()
					relErr = errors.Join(relErr, fmt.Errorf("torture: soak: release %s: %w", locks[i].Key(), err))
					relMu.Unlock()
				}
			}
		})
	}
	for i := range locks {
		rel <- i
	}
	close(rel)
	wg.Wait()
	if relErr != nil {
		return nil, relErr
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Close(cctx); err != nil {
		return nil, fmt.Errorf("torture: soak: close: %w", err)
	}
	if err := closer.Close(); err != nil {
		return nil, fmt.Errorf("torture: soak: close the backend: %w", err)
	}
	res.RenewalsOK, res.RenewalsFailed, res.AtRisk, res.Lost = h.ok.Load(), h.failed.Load(), h.atRisk.Load(), lost.Load()
	h.mu.Lock()
	res.Failures = h.failures
	h.mu.Unlock()
	return res, nil
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
		{"goroutines", func(s SoakSample) float64 { return float64(s.Goroutines) }},
		{"heap in use (MiB)", func(s SoakSample) float64 { return float64(s.HeapInuse) / (1 << 20) }},
		{"process sockets", func(s SoakSample) float64 { return float64(s.Sockets) }},
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
