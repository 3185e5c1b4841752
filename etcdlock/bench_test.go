package etcdlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/testserver"
)

// Uncontended acquire and release: distlock's Client over etcdlock against
// a raw concurrency.Mutex Lock/Unlock on a shared session, interleaved in
// one loop so that both see the same server and disk. Reported per pair of
// operations, with their ratio.
func BenchmarkUncontended(b *testing.B) {
	e := testserver.StartEtcd(b)
	ctx := context.Background()
	cli := newClient(b, e.Endpoints)
	c := newLockClient(b, newBackend(b, cli), distlock.WithTTL(15*time.Second))
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(15))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, "bench/raw")

	var dist, raw time.Duration
	for b.Loop() {
		t0 := time.Now()
		l, err := c.Acquire(ctx, "bench/distlock")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		dist, raw = dist+t1.Sub(t0), raw+time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(dist.Nanoseconds())/n, "distlock-ns/op")
	b.ReportMetric(float64(raw.Nanoseconds())/n, "mutex-ns/op")
	b.ReportMetric(float64(dist)/float64(raw), "ratio")
}

// Hand-off latency: 17 contenders (one holder, 16 waiters queued in etcd,
// each through its own Backend); the time from a holder's Release call to
// the next holder's Acquire returning.
func BenchmarkHandoff16(b *testing.B) {
	e := testserver.StartEtcd(b)
	cli := newClient(b, e.Endpoints)
	const contenders = 17
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clients := make([]*distlock.Client, contenders)
	for i := range clients {
		clients[i] = newLockClient(b, newBackend(b, cli), distlock.WithTTL(15*time.Second))
	}
	var (
		mu       sync.Mutex
		released time.Time
		total    time.Duration
		handoffs int
		left     atomic.Int64
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for {
				l, err := c.Acquire(ctx, "bench/handoff")
				if err != nil {
					return // cancelled: the run is over
				}
				now := time.Now()
				mu.Lock()
				if !released.IsZero() {
					total += now.Sub(released)
					handoffs++
				}
				mu.Unlock()
				if left.Add(-1) < 0 {
					cancel()
					l.Release(context.Background())
					return
				}
				mu.Lock()
				released = time.Now()
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if handoffs > 0 {
		b.ReportMetric(float64(total.Nanoseconds())/float64(handoffs), "handoff-ns")
	}
}
