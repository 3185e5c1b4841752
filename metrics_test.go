package distlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/metrictest"
	"github.com/distlock/distlock/memlock"
)

// A scripted life of locks gives exactly the expected measurements: grants,
// a contended try, a timeout, a renewal, a loss reported by the service, a
// loss at the deadline, a release, and a stale write refused.
func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mp := metrictest.NewProvider()
		srv := memlock.New()
		c := newClient(t, srv, distlock.WithMeterProvider(mp), distlock.WithTTL(3*time.Second))
		other := newClient(t, srv)

		a, err := c.Acquire(ctx, "a") // acquired
		if err != nil {
			t.Fatal(err)
		}
		held, _ := other.Acquire(ctx, "b")
		if _, err := c.TryAcquire(ctx, "b"); !errors.Is(err, distlock.ErrNotAcquired) { // not_acquired
			t.Fatalf("TryAcquire of a held key: %v", err)
		}
		tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		if _, err := c.Acquire(tctx, "b"); !errors.Is(err, context.DeadlineExceeded) { // timeout
			t.Fatalf("Acquire with a timeout: %v", err)
		}
		cancel()
		held.Release(ctx)
		time.Sleep(1200 * time.Millisecond) // a's renewal at TTL/3
		srv.Revoke("a")                     // lost: service_reported
		synctest.Wait()
		a.Release(ctx)
		l, _ := c.Acquire(ctx, "c", distlock.WithRenewal(distlock.NoRenewal)) // acquired
		time.Sleep(3 * time.Second)                                           // lost: deadline
		synctest.Wait()
		l.Release(ctx)
		d, _ := c.Acquire(ctx, "d") // acquired
		d.Release(ctx)              // released
		reg := fence.NewRegister(fence.WithMeterProvider(mp))
		reg.Admit("r", 5)
		if err := reg.Admit("r", 4); !errors.Is(err, fence.ErrStaleToken) { // a rejection
			t.Fatalf("stale Admit: %v", err)
		}

		got := mp.Counts()
		be := "distlock.backend=memlock"
		want := map[string]int64{
			"distlock.acquire.duration{" + be + ",outcome=acquired}":     3,
			"distlock.acquire.duration{" + be + ",outcome=not_acquired}": 1,
			"distlock.acquire.duration{" + be + ",outcome=timeout}":      1,
			"distlock.hold.duration{" + be + ",outcome=lost}":            2,
			"distlock.hold.duration{" + be + ",outcome=released}":        1,
			"distlock.locks.held{" + be + "}":                            0,
			"distlock.waiters{" + be + "}":                               0,
			"distlock.renewals{" + be + ",outcome=ok}":                   1,
			"distlock.lease.headroom{" + be + "}":                        1,
			"distlock.losses{" + be + ",reason=service_reported}":        1,
			"distlock.losses{" + be + ",reason=deadline}":                1,
			"distlock.fence.rejections{distlock.guard=fence.Register}":   1,
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %d, want %d", k, got[k], v)
			}
		}
		for k, v := range got {
			if _, ok := want[k]; !ok && v != 0 {
				t.Errorf("unexpected %s = %d", k, v)
			}
		}
		// The kinds and units dashboards depend on (metrics.go's table).
		for _, in := range []struct {
			name string
			kind metrictest.Kind
			unit string
		}{
			{"distlock.acquire.duration", metrictest.Float64Histogram, "s"},
			{"distlock.hold.duration", metrictest.Float64Histogram, "s"},
			{"distlock.locks.held", metrictest.Int64UpDownCounter, "{lock}"},
			{"distlock.waiters", metrictest.Int64UpDownCounter, "{acquisition}"},
			{"distlock.renewals", metrictest.Int64Counter, "{renewal}"},
			{"distlock.lease.headroom", metrictest.Float64Histogram, "s"},
			{"distlock.losses", metrictest.Int64Counter, "{loss}"},
			{"distlock.fence.rejections", metrictest.Int64Counter, "{write}"},
		} {
			if got, ok := mp.Instrument(in.name); !ok || got.Kind != in.kind || got.Unit != in.unit {
				t.Errorf("%s is a %v of unit %q (made: %v), want a %v of unit %q", in.name, got.Kind, got.Unit, ok, in.kind, in.unit)
			}
		}
	})
}

// Recording a measurement allocates nothing: the Client makes its
// attribute sets once, when it is created, and only WithKeyLabel makes one
// per measurement. So an acquire and release allocate as much on a
// provider that records (metrictest's, whose own recording allocates
// nothing once an attribute set has been seen) as with a no-op provider,
// and as much without a provider of its own (the global one, a no-op
// until one is set).
// TestCycleAllocs bounds the no-op cycle itself.
func TestMetricsAllocs(t *testing.T) {
	ctx := context.Background()
	cycle := func(c *distlock.Client) func() {
		return func() {
			l, err := c.Acquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			l.Release(ctx)
		}
	}
	noMetrics := testing.AllocsPerRun(200, cycle(newClient(t, memlock.New(), distlock.WithMeterProvider(noop.NewMeterProvider()))))
	for _, tc := range []struct {
		name string
		opts []distlock.Option
	}{
		{"global provider", nil},
		{"recording provider", []distlock.Option{distlock.WithMeterProvider(metrictest.NewProvider())}},
	} {
		if n := testing.AllocsPerRun(200, cycle(newClient(t, memlock.New(), tc.opts...))); n > noMetrics {
			t.Errorf("an acquire and release allocate %v times with the %s, %v with a no-op one", n, tc.name, noMetrics)
		}
	}
}
