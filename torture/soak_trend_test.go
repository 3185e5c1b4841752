package torture

import (
	"math"
	"testing"
)

// TestSoakTrend checks the verdicts of the soak's trends on series whose
// answer is known.
func TestSoakTrend(t *testing.T) {
	minutes := func(n int) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = float64(i + 5)
		}
		return xs
	}
	series := func(n int, f func(i int) float64) []float64 {
		ys := make([]float64, n)
		for i := range ys {
			ys[i] = f(i)
		}
		return ys
	}
	for _, c := range []struct {
		name    string
		ys      []float64
		verdict string
		slope   float64 // per minute, when not NaN
	}{
		{"constant", series(26, func(int) float64 { return 21 }), "flat", 0},
		{"zero", series(26, func(int) float64 { return 0 }), "flat", 0},
		// One more of 100 after a while: a step, not a climb.
		{"one step", series(26, func(i int) float64 { return 100 + float64(min(1, i/10)) }), "flat", math.NaN()},
		// The same step on a count of 21 is 5% of it: the bound is
		// conservative, and the table shows a step for what it is.
		{"one step on a small count", series(26, func(i int) float64 { return 21 + float64(min(1, i/10)) }), "grows", math.NaN()},
		// Noise around a level: it rises often but falls too.
		{"noise", series(26, func(i int) float64 { return 70 + float64(i%3) }), "flat", math.NaN()},
		// 1% of the mean per minute: 25% over the soak.
		{"linear leak", series(26, func(i int) float64 { return 100 + float64(i) }), "grows", 1},
		// A goroutine every five minutes: small, but it never falls.
		{"slow climb", series(26, func(i int) float64 { return 200 + float64(i/5) }), "grows", math.NaN()},
		{"draining", series(26, func(i int) float64 { return 100 - 2*float64(i) }), "falls", -2},
		{"too few", []float64{1, 2}, "too few samples", math.NaN()},
	} {
		tr := trend(c.name, minutes(len(c.ys)), c.ys)
		if tr.Verdict != c.verdict {
			t.Errorf("%s: verdict %q (slope %v, relative %v, monotone %v), want %q", c.name, tr.Verdict, tr.Slope, tr.Rel, tr.Monotone, c.verdict)
		}
		if !math.IsNaN(c.slope) && math.Abs(tr.Slope-c.slope) > 1e-9 {
			t.Errorf("%s: slope %v, want %v", c.name, tr.Slope, c.slope)
		}
	}
}
