// Package metrictest records what code measures through the OpenTelemetry
// metric API, for the tests of the packages that record metrics. It needs
// the API only, not the SDK, so that no module's tests pull the SDK in.
//
// A Provider records what is added to Int64Counter and Int64UpDownCounter
// instruments and what is recorded to Float64Histogram instruments: per
// instrument name and attribute set, the number of measurements and their
// sum. It keeps every measurement's total, as the SDK's cumulative
// aggregation does, but no histogram buckets. Every other instrument is a
// no-op. Like the SDK, it refuses an instrument name the API does not
// allow, so a test still catches one.
package metrictest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	"go.opentelemetry.io/otel/metric/noop"
)

// Kind is the kind of a recorded instrument.
type Kind int

// The kinds of instrument a Provider records.
const (
	Int64Counter Kind = iota + 1
	Int64UpDownCounter
	Float64Histogram
)

// String returns the name of the instrument kind, as the API spells it.
func (k Kind) String() string {
	switch k {
	case Int64Counter:
		return "Int64Counter"
	case Int64UpDownCounter:
		return "Int64UpDownCounter"
	case Float64Histogram:
		return "Float64Histogram"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Instrument describes an instrument made on a Provider.
type Instrument struct {
	Kind        Kind
	Unit        string
	Description string
}

// Provider is a metric.MeterProvider that records measurements. Its
// meters share its records whatever their names. The zero value is not
// usable: make one with NewProvider. A Provider is safe for concurrent use.
type Provider struct {
	embedded.MeterProvider

	mu          sync.Mutex
	instruments map[string]Instrument
	points      map[pointKey]*point
}

type pointKey struct {
	name  string
	attrs attribute.Distinct
}

func key(name string, attrs []attribute.KeyValue) pointKey {
	s := attribute.NewSet(attrs...)
	return pointKey{name, s.Equivalent()}
}

type point struct {
	attrs attribute.Set
	count int64
	sum   float64 // a histogram's
	value int64   // a counter's
}

// NewProvider returns a Provider with nothing recorded.
func NewProvider() *Provider {
	return &Provider{instruments: map[string]Instrument{}, points: map[pointKey]*point{}}
}

// Meter returns a meter that records on p.
func (p *Provider) Meter(string, ...metric.MeterOption) metric.Meter {
	return meter{p: p}
}

// Instrument returns the description of the instrument named name, and
// whether one was made.
func (p *Provider) Instrument(name string) (Instrument, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	in, ok := p.instruments[name]
	return in, ok
}

// Value returns what was added to the counter or up-down counter named
// name with exactly the attributes attrs (in any order).
func (p *Provider) Value(name string, attrs ...attribute.KeyValue) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pt := p.points[key(name, attrs)]; pt != nil {
		return pt.value
	}
	return 0
}

// Count returns the number of measurements of the instrument named name
// with exactly the attributes attrs (in any order).
func (p *Provider) Count(name string, attrs ...attribute.KeyValue) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pt := p.points[key(name, attrs)]; pt != nil {
		return pt.count
	}
	return 0
}

// Sum returns the sum of what was recorded to the histogram named name
// with exactly the attributes attrs (in any order).
func (p *Provider) Sum(name string, attrs ...attribute.KeyValue) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pt := p.points[key(name, attrs)]; pt != nil {
		return pt.sum
	}
	return 0
}

// Counts flattens what was recorded to "name{key=value,...}" (keys sorted)
// -> a counter's value, or a histogram's number of measurements. A counter
// whose value came back to 0 is still listed.
func (p *Provider) Counts() map[string]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int64, len(p.points))
	for k, pt := range p.points {
		v := pt.value
		if p.instruments[k.name].Kind == Float64Histogram {
			v = pt.count
		}
		out[flat(k.name, pt.attrs)] = v
	}
	return out
}

// flat is the key of name and attrs in Counts.
func flat(name string, attrs attribute.Set) string {
	kv := make([]string, 0, attrs.Len())
	for _, a := range attrs.ToSlice() {
		kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.Emit()))
	}
	slices.Sort(kv)
	return name + "{" + strings.Join(kv, ",") + "}"
}

// Rejections returns what distlock.fence.rejections counted on p for
// guard, and fails t if the instrument was made as anything but the
// Int64Counter of unit {write} that dashboards expect.
func Rejections(t testing.TB, p *Provider, guard string) int64 {
	t.Helper()
	const name = "distlock.fence.rejections"
	if in, ok := p.Instrument(name); ok && (in.Kind != Int64Counter || in.Unit != "{write}") {
		t.Errorf("%s is a %v of unit %q, want an Int64Counter of unit {write}", name, in.Kind, in.Unit)
	}
	return p.Value(name, attribute.String("distlock.guard", guard))
}

// register records the instrument named name, refusing a name the API
// does not allow (as the SDK does) and a name made before as another kind
// or unit (which the SDK reports as a conflict and exports twice).
func (p *Provider) register(name string, in Instrument) error {
	if err := validName(name); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.instruments[name]; ok && (old.Kind != in.Kind || old.Unit != in.Unit) {
		return fmt.Errorf("metrictest: %s made as a %v of unit %q, then as a %v of unit %q", name, old.Kind, old.Unit, in.Kind, in.Unit)
	}
	p.instruments[name] = in
	return nil
}

// validName applies the API's instrument name syntax:
// [A-Za-z][A-Za-z0-9_./-]{0,254}.
func validName(name string) error {
	ok := len(name) > 0 && len(name) <= 255
	for i, c := range name {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || !('0' <= c && c <= '9' || strings.ContainsRune("_./-", c))) {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("metrictest: invalid instrument name %q", name)
	}
	return nil
}

func (p *Provider) record(name string, attrs attribute.Set, value int64, f float64) {
	k := pointKey{name, attrs.Equivalent()}
	p.mu.Lock()
	defer p.mu.Unlock()
	pt := p.points[k]
	if pt == nil {
		pt = &point{attrs: attrs}
		p.points[k] = pt
	} else if !pt.attrs.Equals(&attrs) {
		// Distinct is a hash: a test helper must be exact.
		panic(fmt.Sprintf("metrictest: attribute sets %v and %v of %s share a key", pt.attrs.ToSlice(), attrs.ToSlice(), name))
	}
	pt.count++
	pt.value += value
	pt.sum += f
}

type meter struct {
	noop.Meter
	p *Provider
}

func (m meter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	cfg := metric.NewInt64CounterConfig(opts...)
	if err := m.p.register(name, Instrument{Int64Counter, cfg.Unit(), cfg.Description()}); err != nil {
		return noop.Int64Counter{}, err
	}
	return int64Counter{p: m.p, name: name}, nil
}

func (m meter) Int64UpDownCounter(name string, opts ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	cfg := metric.NewInt64UpDownCounterConfig(opts...)
	if err := m.p.register(name, Instrument{Int64UpDownCounter, cfg.Unit(), cfg.Description()}); err != nil {
		return noop.Int64UpDownCounter{}, err
	}
	return int64UpDownCounter{p: m.p, name: name}, nil
}

func (m meter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	cfg := metric.NewFloat64HistogramConfig(opts...)
	// The SDK refuses bucket boundaries that are not finite and strictly
	// ascending; so does this provider, so that the tests catch them.
	b := cfg.ExplicitBucketBoundaries()
	for i, v := range b {
		if math.IsNaN(v) || math.IsInf(v, 0) || i > 0 && v <= b[i-1] {
			return noop.Float64Histogram{}, fmt.Errorf("metrictest: %s: bucket boundaries %v not finite and strictly ascending", name, b)
		}
	}
	if err := m.p.register(name, Instrument{Float64Histogram, cfg.Unit(), cfg.Description()}); err != nil {
		return noop.Float64Histogram{}, err
	}
	return float64Histogram{p: m.p, name: name}, nil
}

type int64Counter struct {
	embedded.Int64Counter
	p    *Provider
	name string
}

func (c int64Counter) Add(_ context.Context, incr int64, opts ...metric.AddOption) {
	c.p.record(c.name, metric.NewAddConfig(opts).Attributes(), incr, 0)
}

func (int64Counter) Enabled(context.Context) bool { return true }

type int64UpDownCounter struct {
	embedded.Int64UpDownCounter
	p    *Provider
	name string
}

func (c int64UpDownCounter) Add(_ context.Context, incr int64, opts ...metric.AddOption) {
	c.p.record(c.name, metric.NewAddConfig(opts).Attributes(), incr, 0)
}

func (int64UpDownCounter) Enabled(context.Context) bool { return true }

type float64Histogram struct {
	embedded.Float64Histogram
	p    *Provider
	name string
}

func (h float64Histogram) Record(_ context.Context, v float64, opts ...metric.RecordOption) {
	h.p.record(h.name, metric.NewRecordConfig(opts).Attributes(), 0, v)
}

func (float64Histogram) Enabled(context.Context) bool { return true }

var (
	_ metric.MeterProvider      = (*Provider)(nil)
	_ metric.Int64Counter       = int64Counter{}
	_ metric.Int64UpDownCounter = int64UpDownCounter{}
	_ metric.Float64Histogram   = float64Histogram{}
)
