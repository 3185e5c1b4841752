// Package fencecount counts the stale writes that the project's fencing
// guards refuse (fence.Register, redislock.Fence, etcdlock's fenced Txn,
// ...), on one OpenTelemetry counter:
//
//	distlock.fence.rejections  counter  distlock.guard: the guard's name
package fencecount

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Counter counts one guard's rejections. Its zero value is not usable; New
// makes one. It is safe for concurrent use.
type Counter struct {
	mp    metric.MeterProvider
	guard string

	once sync.Once
	c    metric.Int64Counter
	opts []metric.AddOption
}

// New returns the counter of guard on mp (nil: the global provider, read
// when the first rejection is counted, so that a provider installed later
// still gets it).
func New(mp metric.MeterProvider, guard string) *Counter {
	return &Counter{mp: mp, guard: guard}
}

// Rejected counts one refused write.
func (c *Counter) Rejected(ctx context.Context) {
	c.once.Do(func() {
		mp := c.mp
		if mp == nil {
			mp = otel.GetMeterProvider()
		}
		var err error
		c.c, err = mp.Meter("github.com/distlock/distlock").Int64Counter("distlock.fence.rejections",
			metric.WithUnit("{write}"), metric.WithDescription("Writes refused for a stale fencing token."))
		if err != nil {
			c.c = nil
		}
		c.opts = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("distlock.guard", c.guard)))}
	})
	if c.c != nil {
		c.c.Add(ctx, 1, c.opts...)
	}
}
