package pglock_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Uncontended acquire and release: distlock's Client over pglock (a pool
// connection, distlock_acquire with its token, the release statement)
// against raw pg_advisory_lock/pg_advisory_unlock on one connection taken
// from a pool, interleaved in one loop so that both see the same server.
// The raw pair is run twice: with the key as a parameter (pgx prepares
// the statement once and then sends only Bind and Execute, as pglock's
// statements are sent), the "ratio" baseline, and with the key written
// into the SQL text and no parameter (pgx's simple protocol), the
// "ratio-simple" baseline. The Backend alone, without the Client, is
// measured too ("backend-ns/op", "backend-ratio"). Reported per pair of
// operations.
func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	be := newBackend(b, server)
	c := newClient(b, be)
	raw, err := newPool(b, server).Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Release()

	var dist, direct, simple, bare time.Duration
	for b.Loop() {
		t0 := time.Now()
		clientCycle(b, c, "bench/distlock")
		t1 := time.Now()
		rawCycle(b, raw)
		t2 := time.Now()
		if _, err := raw.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended('bench/raw', 0))`); err != nil {
			b.Fatal(err)
		}
		if _, err := raw.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended('bench/raw', 0))`); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		l2, err := be.Acquire(ctx, "bench/backend", driver.AcquireOptions{TTL: distlock.DefaultTTL, Wait: true})
		if err != nil {
			b.Fatal(err)
		}
		if err := l2.Release(ctx); err != nil {
			b.Fatal(err)
		}
		dist, direct, simple, bare = dist+t1.Sub(t0), direct+t2.Sub(t1), simple+t3.Sub(t2), bare+time.Since(t3)
	}
	n := float64(b.N)
	b.ReportMetric(float64(dist.Nanoseconds())/n, "distlock-ns/op")
	b.ReportMetric(float64(direct.Nanoseconds())/n, "raw-ns/op")
	b.ReportMetric(float64(simple.Nanoseconds())/n, "raw-simple-ns/op")
	b.ReportMetric(float64(dist)/float64(direct), "ratio")
	b.ReportMetric(float64(dist)/float64(simple), "ratio-simple")
	b.ReportMetric(float64(bare.Nanoseconds())/n, "backend-ns/op")
	b.ReportMetric(float64(bare)/float64(direct), "backend-ratio")
}

// Uncontended acquire and release in lease mode (directly, with LISTEN),
// against the parameterised raw advisory lock pair as in
// BenchmarkUncontended.
func BenchmarkLeaseUncontended(b *testing.B) {
	ctx := context.Background()
	c := newClient(b, newLeaseBackend(b, server.DSN, pglock.WithListen(server.DSN)))
	raw, err := newPool(b, server).Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Release()
	var dist, direct time.Duration
	for b.Loop() {
		t0 := time.Now()
		clientCycle(b, c, "bench/lease")
		t1 := time.Now()
		rawCycle(b, raw)
		dist, direct = dist+t1.Sub(t0), direct+time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(dist.Nanoseconds())/n, "distlock-ns/op")
	b.ReportMetric(float64(direct.Nanoseconds())/n, "raw-ns/op")
	b.ReportMetric(float64(dist)/float64(direct), "ratio")
}

// clientCycle acquires key through c and releases it.
func clientCycle(b *testing.B, c *distlock.Client, key string) {
	ctx := context.Background()
	l, err := c.Acquire(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		b.Fatal(err)
	}
}

// rawCycle takes and gives back an advisory lock on raw with the key as a
// parameter: the baseline of the uncontended benchmarks.
func rawCycle(b *testing.B, raw *pgxpool.Conn) {
	ctx := context.Background()
	if _, err := raw.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, "bench/raw"); err != nil {
		b.Fatal(err)
	}
	if _, err := raw.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, "bench/raw"); err != nil {
		b.Fatal(err)
	}
}

// Hand-off latency: 5 contenders, each through its own Backend (one
// process each), all waiting in the server's queue but the holder; the
// time from a holder's Release call to the next holder's Acquire
// returning. Reported as median, p99 and max.
func BenchmarkHandoff4(b *testing.B) {
	handoff(b, func() driver.Backend { return newBackend(b, server) })
}

// Hand-off latency in lease mode, each contender woken by NOTIFY on its
// own LISTEN session.
func BenchmarkLeaseHandoff4(b *testing.B) {
	handoff(b, func() driver.Backend { return newLeaseBackend(b, server.DSN, pglock.WithListen(server.DSN)) })
}

func handoff(b *testing.B, newB func() driver.Backend) {
	ctx := context.Background()
	const contenders = 5
	clients := make([]*distlock.Client, contenders)
	for i := range clients {
		clients[i] = newClient(b, newB())
	}
	var (
		mu       sync.Mutex
		released time.Time
		gaps     []time.Duration
		turns    = b.N
	)
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for {
				l, err := c.Acquire(ctx, "bench/handoff")
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				if !released.IsZero() {
					gaps = append(gaps, time.Since(released))
				}
				done := turns <= 0
				turns--
				released = time.Now()
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
				if done {
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if len(gaps) == 0 {
		return
	}
	slices.Sort(gaps)
	q := func(p float64) float64 { return float64(gaps[int(p*float64(len(gaps)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "median-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
}
