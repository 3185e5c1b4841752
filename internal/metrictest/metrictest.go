// Package metrictest reads what an OpenTelemetry SDK manual reader
// collected, for the tests of the packages that record metrics.
package metrictest

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Rejections collects r and returns the value of distlock.fence.rejections
// for guard.
func Rejections(t testing.TB, r *sdkmetric.ManualReader, guard string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "distlock.fence.rejections" {
				for _, p := range sum.DataPoints {
					if v, _ := p.Attributes.Value("distlock.guard"); v.AsString() == guard {
						n += p.Value
					}
				}
			}
		}
	}
	return n
}

// Reader returns a manual reader and a provider that feeds it.
func Reader() (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	r := sdkmetric.NewManualReader()
	return r, sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
}
