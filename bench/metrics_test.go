package bench

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
)

// BenchmarkCycleMetrics measures an acquire and release on memlock with
// the metrics off (the global no-op provider), and on with the OTel SDK and
// a manual reader (what a Client exporting metrics pays per cycle). It
// lives here, not beside the Client, because only this module may depend
// on the SDK:
//
//	go test -run '^$' -bench CycleMetrics -count 5 .
func BenchmarkCycleMetrics(b *testing.B) {
	ctx := context.Background()
	sdk := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer sdk.Shutdown(ctx)
	for _, sub := range []struct {
		name string
		opts []distlock.Option
	}{
		{"default", nil},
		{"sdk", []distlock.Option{distlock.WithMeterProvider(sdk)}},
	} {
		b.Run(sub.name, func(b *testing.B) {
			c, err := distlock.New(memlock.New(), sub.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close(ctx)
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.Acquire(ctx, "k")
				if err != nil {
					b.Fatal(err)
				}
				l.Release(ctx)
			}
		})
	}
}
