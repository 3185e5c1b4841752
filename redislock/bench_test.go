package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// BenchmarkAcquireRelease measures an uncontended acquire and release (one
// goroutine, one key), a single try and a blocking Acquire, next to its
// floor on the same server and connection pool: a raw SET NX PX and a
// compare-and-delete script, the least a safe Redis lock can send. It
// reports both, their ratio, and (from INFO commandstats over further
// cycles) the requests and the server time per cycle of each.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, mode := range []struct {
		name string
		wait bool
	}{{"Try", false}, {"Wait", true}} {
		b.Run(mode.name, func(b *testing.B) { benchAcquireRelease(b, mode.wait) })
	}
}

func benchAcquireRelease(b *testing.B, wait bool) {
	srv := startRedis(b)
	ctx := context.Background()
	c := newClient(b, srv.Addr)
	admin := newClient(b, srv.Addr)
	bk := mustNew(b, c)
	b.Cleanup(func() { bk.Close() })
	opts := driver.AcquireOptions{TTL: 10 * time.Second, Wait: wait}

	lockOnce := func() {
		l, err := bk.Acquire(ctx, "bench", opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	floorOnce := func() {
		if ok, err := c.SetNX(ctx, "floor", "owner", opts.TTL).Result(); err != nil || !ok {
			b.Fatalf("SET NX: %v, %v", ok, err)
		}
		if n, err := compareDel.Run(ctx, c, []string{"floor"}, "owner").Int(); err != nil || n != 1 {
			b.Fatalf("compare-and-delete: %d, %v", n, err)
		}
	}
	lockOnce() // load the scripts
	floorOnce()

	var lib, floor time.Duration
	n := 0
	for b.Loop() {
		t0 := time.Now()
		lockOnce()
		t1 := time.Now()
		floorOnce()
		floor += time.Since(t1)
		lib += t1.Sub(t0)
		n++
	}
	b.ReportMetric(float64(lib.Nanoseconds())/float64(n), "redislock-ns/op")
	b.ReportMetric(float64(floor.Nanoseconds())/float64(n), "floor-ns/op")
	b.ReportMetric(float64(lib)/float64(floor), "x-floor")

	// Requests and server time, counted apart from the timed cycles: the
	// commands clients send (those the scripts run are inside the time of
	// EVALSHA).
	const cycles = 1000
	measure := func(once func(), names ...string) cmdStat {
		resetStats(b, admin)
		for range cycles {
			once()
		}
		return sumStats(commandStats(b, admin), names...)
	}
	libStat := measure(lockOnce, "evalsha", "eval", "subscribe", "unsubscribe", "config|get")
	floorStat := measure(floorOnce, "set", "evalsha")
	b.ReportMetric(float64(libStat.calls)/cycles, "requests/op")
	b.ReportMetric(float64(libStat.usec)/cycles, "server-µs/op")
	b.ReportMetric(float64(floorStat.usec)/cycles, "floor-server-µs/op")
}

// BenchmarkHandOff measures the time from a release to the next grant with
// 16 goroutines competing for one key through one Backend (one process):
// each takes the key, releases it at once and waits again.
func BenchmarkHandOff(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts []redislock.Option
	}{
		{"Default", nil},
		{"Unordered", []redislock.Option{redislock.WithUnordered()}},
	} {
		b.Run(mode.name, func(b *testing.B) { benchHandOff(b, 16, mode.opts...) })
	}
}

func benchHandOff(b *testing.B, waiters int, opts ...redislock.Option) {
	srv := startRedis(b)
	bk := mustNew(b, newClient(b, srv.Addr), opts...)
	b.Cleanup(func() { bk.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	aopts := driver.AcquireOptions{TTL: time.Minute, Wait: true}

	var (
		releasedAt atomic.Int64 // UnixNano just before the last release; 0 at first
		mu         sync.Mutex
		lat        []time.Duration
		handoffs   atomic.Int64
	)
	want := int64(b.N)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			for {
				l, err := bk.Acquire(ctx, "handoff", aopts)
				if err != nil {
					if !errors.Is(err, context.Canceled) {
						b.Error(err)
					}
					return
				}
				if at := releasedAt.Load(); at != 0 {
					d := time.Since(time.Unix(0, at))
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
				done := handoffs.Add(1) >= want
				releasedAt.Store(time.Now().UnixNano())
				if err := l.Release(context.Background()); err != nil {
					b.Error(err)
				}
				if done {
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	b.ReportMetric(float64(sum.Microseconds())/float64(len(lat)), "handoff-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkServerTime measures the server's share of an uncontended cycle
// (acquire and release), without the network's: cycles are pipelined by
// the hundred, on 100 keys. It reports INFO commandstats' time (the time
// the server spent executing the commands, scripts included) and the
// server process's CPU time (INFO cpu: less disturbed by other processes
// on a busy machine, but including its share of I/O). The floor,
// SET NX PX and a compare-and-delete script, runs on a server of its own
// so that its EVALSHA is counted apart; batches alternate.
func BenchmarkServerTime(b *testing.B) {
	ctx := context.Background()
	lib, floor := startRedis(b), startRedis(b)
	lc, fc := newClient(b, lib.Addr), newClient(b, floor.Addr)
	bk := mustNew(b, lc)
	b.Cleanup(func() { bk.Close() })
	if err := redislock.LoadScripts(ctx, lc); err != nil {
		b.Fatal(err)
	}
	if err := compareDel.Load(ctx, fc).Err(); err != nil {
		b.Fatal(err)
	}
	const batch = 100
	keys := make([]string, batch)
	for i := range keys {
		keys[i] = fmt.Sprintf("server-time/%d", i)
	}
	run := func(c *redis.Client, queue func(pipe redis.Pipeliner, key string)) {
		pipe := c.Pipeline()
		for _, k := range keys {
			queue(pipe, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	libCycle := func(pipe redis.Pipeliner, key string) { redislock.QueueCycle(ctx, bk, pipe, key, 10*time.Second) }
	floorCycle := func(pipe redis.Pipeliner, key string) {
		pipe.SetNX(ctx, key, "owner", 10*time.Second)
		compareDel.EvalSha(ctx, pipe, []string{key}, "owner")
	}
	resetStats(b, lc)
	resetStats(b, fc)
	lcpu, fcpu := serverCPU(b, lc), serverCPU(b, fc)
	n := 0
	for b.Loop() {
		run(lc, libCycle)
		run(fc, floorCycle)
		n += batch
	}
	lcpu, fcpu = serverCPU(b, lc)-lcpu, serverCPU(b, fc)-fcpu
	l := sumStats(commandStats(b, lc), "evalsha")
	f := sumStats(commandStats(b, fc), "evalsha", "set")
	if l.calls != int64(2*n) {
		b.Fatalf("%d script calls for %d cycles", l.calls, n)
	}
	b.ReportMetric(float64(l.usec)/float64(n), "server-µs/cycle")
	b.ReportMetric(float64(f.usec)/float64(n), "floor-server-µs/cycle")
	b.ReportMetric(float64(l.usec)/float64(f.usec), "x-floor")
	b.ReportMetric(lcpu.Seconds()*1e6/float64(n), "cpu-µs/cycle")
	b.ReportMetric(fcpu.Seconds()*1e6/float64(n), "floor-cpu-µs/cycle")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRefreshAll measures one RefreshAll of 10,000 leases (the
// watchdog's batch), with the requests and the server time it costs.
func BenchmarkRefreshAll(b *testing.B) {
	srv := startRedis(b)
	ctx := context.Background()
	c, admin := newClient(b, srv.Addr), newClient(b, srv.Addr)
	bk := mustNew(b, c)
	b.Cleanup(func() { bk.Close() })
	const n = 10000
	leases := make([]driver.Lease, n)
	for i := range leases {
		l, err := bk.Acquire(ctx, fmt.Sprintf("refresh/%d", i), driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		leases[i] = l
	}
	bk.RefreshAll(ctx, leases, time.Minute) // load the script
	resetStats(b, admin)
	cpu := serverCPU(b, admin)
	rounds := 0
	for b.Loop() {
		for i, r := range bk.RefreshAll(ctx, leases, time.Minute) {
			if r.Err != nil {
				b.Fatalf("lease %d: %v", i, r.Err)
			}
		}
		rounds++
	}
	cpu = serverCPU(b, admin) - cpu
	st := sumStats(commandStats(b, admin), "evalsha", "eval")
	b.ReportMetric(float64(st.calls)/float64(rounds), "requests/op")
	b.ReportMetric(float64(st.usec)/float64(rounds*n), "server-µs/lease")
	b.ReportMetric(cpu.Seconds()*1e6/float64(rounds*n), "cpu-µs/lease")
}
