package redislock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/redislock"
)

// BenchmarkAcquireRelease measures an uncontended acquire and release (one
// goroutine, one key), next to its floor on the same server and connection
// pool: a raw SET NX PX and a compare-and-delete script, the least a safe
// Redis lock can send. It reports both and their ratio.
func BenchmarkAcquireRelease(b *testing.B) {
	srv := startRedis(b)
	ctx := context.Background()
	c := newClient(b, srv.Addr)
	bk := redislock.New(c)
	b.Cleanup(func() { bk.Close() })
	opts := distlock.AcquireOptions{TTL: 10 * time.Second}

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
		{"Fair", []redislock.Option{redislock.WithFair()}},
	} {
		b.Run(mode.name, func(b *testing.B) { benchHandOff(b, 16, mode.opts...) })
	}
}

func benchHandOff(b *testing.B, waiters int, opts ...redislock.Option) {
	srv := startRedis(b)
	bk := redislock.New(newClient(b, srv.Addr), opts...)
	b.Cleanup(func() { bk.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	aopts := distlock.AcquireOptions{TTL: time.Minute, Wait: true}

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
