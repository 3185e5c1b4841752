package distlock_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// BenchmarkHold10k measures what 10,000 held, renewing locks cost one
// Client: extra goroutines, heap per lock, and renewal traffic (leases
// refreshed and batched calls per second). Run with
//
//	go test -run '^$' -bench Hold10k -benchtime 3x .
func BenchmarkHold10k(b *testing.B) {
	const n = 10_000
	const window = 2 * time.Second
	ctx := context.Background()
	for range b.N {
		be := &countingBackend{Backend: memlock.New()}
		c, _ := distlock.New(be, distlock.WithTTL(600*time.Millisecond))
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		g0 := runtime.NumGoroutine()
		locks := make([]*distlock.Lock, n)
		for i := range locks {
			l, err := c.Acquire(ctx, fmt.Sprintf("held/%d", i))
			if err != nil {
				b.Fatal(err)
			}
			locks[i] = l
		}
		be.calls.Store(0)
		be.leases.Store(0)
		time.Sleep(window) // renewals run meanwhile; this is what is measured
		runtime.GC()
		runtime.ReadMemStats(&m1)
		g1 := runtime.NumGoroutine()
		lost := 0
		for _, l := range locks {
			if l.Err() != nil {
				lost++
			}
			l.Release(ctx)
		}
		c.Close(ctx)
		b.ReportMetric(float64(g1-g0), "goroutines")
		b.ReportMetric(float64(m1.HeapAlloc-m0.HeapAlloc)/n, "heapB/lock")
		b.ReportMetric(float64(be.leases.Load())/window.Seconds(), "renewals/s")
		b.ReportMetric(float64(be.calls.Load())/window.Seconds(), "calls/s")
		b.ReportMetric(float64(lost), "lost")
	}
}
