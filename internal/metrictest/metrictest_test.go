package metrictest_test

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/internal/metrictest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Measurements from many goroutines add up per name and attribute set,
// whatever the order of the attributes.
func TestProviderRecords(t *testing.T) {
	p := metrictest.NewProvider()
	m := p.Meter("test")
	c, err := m.Int64Counter("c", metric.WithUnit("{x}"))
	if err != nil {
		t.Fatal(err)
	}
	ud, err := m.Int64UpDownCounter("ud")
	if err != nil {
		t.Fatal(err)
	}
	h, err := m.Float64Histogram("h", metric.WithUnit("s"))
	if err != nil {
		t.Fatal(err)
	}
	ab := metric.WithAttributes(attribute.String("a", "1"), attribute.Int("b", 2))
	ba := metric.WithAttributes(attribute.Int("b", 2), attribute.String("a", "1"))
	ctx := context.Background()
	const n = 100
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c.Add(ctx, 2, ab)
			c.Add(ctx, 1, ba)
			c.Add(ctx, 5)
			ud.Add(ctx, 1)
			ud.Add(ctx, -1)
			h.Record(ctx, 0.5, ab)
		})
	}
	wg.Wait()

	a, b := attribute.String("a", "1"), attribute.Int("b", 2)
	for _, tc := range []struct {
		what      string
		got, want float64
	}{
		{"Value(c, a, b)", float64(p.Value("c", a, b)), 3 * n},
		{"Value(c, b, a)", float64(p.Value("c", b, a)), 3 * n},
		{"Count(c, a, b)", float64(p.Count("c", a, b)), 2 * n},
		{"Value(c)", float64(p.Value("c")), 5 * n},
		{"Value(c, a)", float64(p.Value("c", a)), 0},
		{"Value(ud)", float64(p.Value("ud")), 0},
		{"Count(ud)", float64(p.Count("ud")), 2 * n},
		{"Count(h, a, b)", float64(p.Count("h", a, b)), n},
		{"Sum(h, a, b)", p.Sum("h", a, b), 0.5 * n},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.what, tc.got, tc.want)
		}
	}
	want := map[string]int64{"c{a=1,b=2}": 3 * n, "c{}": 5 * n, "ud{}": 0, "h{a=1,b=2}": n}
	got := p.Counts()
	if len(got) != len(want) {
		t.Errorf("Counts() = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Counts()[%s] = %d, want %d", k, got[k], v)
		}
	}
	if in, ok := p.Instrument("h"); !ok || in.Kind != metrictest.Float64Histogram || in.Unit != "s" {
		t.Errorf("Instrument(h) = %+v, %v; want a Float64Histogram of unit s", in, ok)
	}
	if !c.Enabled(ctx) || !ud.Enabled(ctx) || !h.Enabled(ctx) {
		t.Error("an instrument of a Provider is not enabled")
	}
}

// An instrument name the API does not allow is refused, as the SDK refuses
// it, and so is a name made again as another kind or unit.
func TestProviderRefuses(t *testing.T) {
	p := metrictest.NewProvider()
	m := p.Meter("test")
	for _, name := range []string{"", "1st", "a b", "a{b}", "é", strings.Repeat("a", 256)} {
		if _, err := m.Int64Counter(name); err == nil {
			t.Errorf("Int64Counter(%q) made", name)
		}
	}
	for _, name := range []string{"a", "distlock.fence.rejections", "A_b-c/d.e9", strings.Repeat("a", 255)} {
		if _, err := m.Int64Counter(name); err != nil {
			t.Errorf("Int64Counter(%q): %v", name, err)
		}
	}
	if _, err := m.Float64Histogram("a"); err == nil {
		t.Error("a counter's name made again as a histogram")
	}
	if _, err := m.Int64Counter("a", metric.WithUnit("s")); err == nil {
		t.Error("a counter's name made again with another unit")
	}
	if _, err := m.Int64Counter("a"); err != nil {
		t.Errorf("the same counter made again: %v", err)
	}
	for _, b := range [][]float64{{1, 1}, {2, 1}, {0, math.Inf(1)}, {math.NaN()}} {
		if _, err := m.Float64Histogram("h", metric.WithExplicitBucketBoundaries(b...)); err == nil {
			t.Errorf("a histogram with bucket boundaries %v made", b)
		}
	}
	if _, err := m.Float64Histogram("h", metric.WithExplicitBucketBoundaries(0.001, 0.01, 1)); err != nil {
		t.Errorf("a histogram with ascending boundaries: %v", err)
	}
}
