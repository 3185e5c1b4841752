package fence

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Option configures a fencing guard: a Register, or the storage-side
// guard of a backend package (redislock.Fence, etcdlock.Fence,
// pglock.Fence), each built with options of this type.
type Option func(*config)

type config struct {
	meters metric.MeterProvider
}

// WithMeterProvider sets where the guard counts the writes it refuses:
// the counter distlock.fence.rejections, with the attribute
// distlock.guard naming the guard ("fence.Register", "redislock.Fence",
// ...). The guard's series is there from its creation, at 0. Default: the
// global provider (otel.GetMeterProvider); one installed after the guard
// was made gets the counts, not the zero.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meters = mp }
}

// Counter counts the writes that one fencing guard refuses, on the
// counter distlock.fence.rejections with the attribute distlock.guard. A
// guard of another package makes one with NewCounter from its options, so
// that every guard counts the same way. It is safe for concurrent use.
type Counter struct {
	c    metric.Int64Counter // nil if the provider refused it
	opts []metric.AddOption
}

// NewCounter returns the Counter of the guard named guard (its package and
// type, such as "redislock.Fence"), configured by opts; nil options are
// ignored. The guard's series starts at 0, so that an alert on it sees 0
// rather than no data.
func NewCounter(guard string, opts ...Option) *Counter {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	mp := cfg.meters
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	c, err := mp.Meter("github.com/distlock/distlock").Int64Counter("distlock.fence.rejections",
		metric.WithUnit("{write}"), metric.WithDescription("Writes refused for a stale fencing token."))
	if err != nil {
		return &Counter{}
	}
	ctr := &Counter{c: c, opts: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("distlock.guard", guard)))}}
	c.Add(context.Background(), 0, ctr.opts...)
	return ctr
}

// Rejected counts one refused write.
func (c *Counter) Rejected(ctx context.Context) {
	if c.c != nil {
		c.c.Add(ctx, 1, c.opts...)
	}
}
