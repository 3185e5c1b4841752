package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
)

// BenchmarkCycle runs the uncontended acquire+release cycle of one subject
// per sub-benchmark, for profiling one library at a time:
//
//	go test -run '^$' -bench 'Cycle/distlock-redis-try$' -cpuprofile cpu.out .
//	go tool pprof -top cpu.out
//
// The ratios between subjects come from TestResults, which interleaves
// them; this benchmark runs each alone.
func BenchmarkCycle(b *testing.B) {
	env := NewEnv(b)
	ctx := context.Background()
	for _, s := range Subjects {
		if !s.Has(Latency) {
			continue
		}
		b.Run(s.ID, func(b *testing.B) {
			l, err := s.Open(env)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			key := keyFor(s, "cycle")
			for b.Loop() {
				u, err := l.Lock(ctx, key)
				if err != nil {
					b.Fatal(err)
				}
				if err := u(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParallel runs cycles of one subject from 64 goroutines on
// distinct keys (the throughput measurement), for profiling:
//
//	go test -run '^$' -bench 'Parallel/distlock-redis-try$' -cpuprofile cpu.out .
func BenchmarkParallel(b *testing.B) {
	env := NewEnv(b)
	ctx := context.Background()
	for _, s := range Subjects {
		if !s.Has(Throughput) {
			continue
		}
		b.Run(s.ID, func(b *testing.B) {
			l, err := s.Open(env)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var next atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 cores
			b.RunParallel(func(pb *testing.PB) {
				key := keyFor(s, "parallel/"+strconv.FormatInt(next.Add(1), 10))
				for pb.Next() {
					u, err := l.Lock(ctx, key)
					if err == nil {
						err = u(ctx)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
