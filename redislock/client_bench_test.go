package redislock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// BenchmarkClientCycle measures an uncontended cycle through the Client
// (Acquire, TryAcquire) next to the Backend alone and the floor, the
// subjects taking turns cycle by cycle so that noise on the machine falls
// on all of them alike. Each reports its median time per cycle (a busy
// machine's outliers stay out of it) and its ratio to the floor's;
// allocs/op is that of the four together.
//
//	go test -run '^$' -bench ClientCycle -benchmem .
func BenchmarkClientCycle(b *testing.B) {
	srv := startRedis(b)
	ctx := context.Background()
	c := newClient(b, srv.Addr)
	bk := mustNew(b, c)
	cl, err := distlock.New(bk, distlock.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close(ctx); bk.Close() })
	opts := driver.AcquireOptions{TTL: 10 * time.Second}
	subjects := []struct {
		name string
		once func()
	}{
		{"floor", func() {
			if ok, err := c.SetNX(ctx, "floor", "owner", opts.TTL).Result(); err != nil || !ok {
				b.Fatalf("SET NX: %v, %v", ok, err)
			}
			if n, err := compareDel.Run(ctx, c, []string{"floor"}, "owner").Int(); err != nil || n != 1 {
				b.Fatalf("compare-and-delete: %d, %v", n, err)
			}
		}},
		{"backend", func() {
			l, err := bk.Acquire(ctx, "backend", opts)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}},
		{"try", func() {
			l, err := cl.TryAcquire(ctx, "try")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}},
		{"acquire", func() {
			l, err := cl.Acquire(ctx, "acquire")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}},
	}
	for _, s := range subjects {
		s.once() // load the scripts
	}
	samples := make([][]time.Duration, len(subjects))
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		for i := range subjects {
			j := (i + n) % len(subjects)
			t := time.Now()
			subjects[j].once()
			samples[j] = append(samples[j], time.Since(t))
		}
		n++
	}
	p50 := make([]time.Duration, len(subjects))
	for i, s := range subjects {
		slices.Sort(samples[i])
		p50[i] = samples[i][len(samples[i])/2]
		b.ReportMetric(float64(p50[i].Nanoseconds()), s.name+"-p50-ns")
		if i > 0 {
			b.ReportMetric(float64(p50[i])/float64(p50[0]), s.name+"-x-floor")
		}
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkClientThroughput measures cycles per second with 64 goroutines,
// each on a key of its own, through one Client (Acquire), through the
// Backend alone, and for the floor, over one go-redis client with its
// default pool; the subjects take turns, 200ms each per round. It reports
// each one's rate and its ratio to the floor's.
//
//	go test -run '^$' -bench ClientThroughput -benchtime 5x .
func BenchmarkClientThroughput(b *testing.B) {
	srv := startRedis(b)
	ctx := context.Background()
	c := newClient(b, srv.Addr)
	bk := mustNew(b, c)
	cl, err := distlock.New(bk, distlock.WithTTL(10*time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close(ctx); bk.Close() })
	const workers = 64
	const slice = 200 * time.Millisecond
	ttl := 10 * time.Second
	subjects := []struct {
		name string
		once func(key string) error
	}{
		{"floor", func(key string) error {
			if ok, err := c.SetNX(ctx, key, "owner", ttl).Result(); err != nil || !ok {
				return fmt.Errorf("SET NX: %v, %v", ok, err)
			}
			return compareDel.Run(ctx, c, []string{key}, "owner").Err()
		}},
		{"backend", func(key string) error {
			l, err := bk.Acquire(ctx, key, driver.AcquireOptions{TTL: ttl, Wait: true})
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
		{"acquire", func(key string) error {
			l, err := cl.Acquire(ctx, key)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}},
	}
	counts := make([]int64, len(subjects))
	var spent [8]time.Duration
	round := 0
	for b.Loop() {
		for i := range subjects {
			j := (i + round) % len(subjects)
			s := subjects[j]
			var n atomic.Int64
			var failed atomic.Pointer[error] // the first error (an atomic.Value would panic on a second of another type)
			stop := time.Now().Add(slice)
			var wg sync.WaitGroup
			for w := range workers {
				key := fmt.Sprintf("tp/%s/%d", s.name, w)
				wg.Go(func() {
					for time.Now().Before(stop) {
						if err := s.once(key); err != nil {
							failed.CompareAndSwap(nil, &err)
							return
						}
						n.Add(1)
					}
				})
			}
			t := time.Now()
			wg.Wait()
			spent[j] += time.Since(t)
			if err := failed.Load(); err != nil {
				b.Fatal(*err)
			}
			counts[j] += n.Load()
		}
		round++
	}
	rate := func(i int) float64 { return float64(counts[i]) / spent[i].Seconds() }
	for i, s := range subjects {
		b.ReportMetric(rate(i), s.name+"-cycles/s")
		if i > 0 {
			b.ReportMetric(rate(i)/rate(0), s.name+"-x-floor")
		}
	}
	b.ReportMetric(0, "ns/op")
}
