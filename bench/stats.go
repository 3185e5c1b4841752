package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// quantile returns the q-quantile (0 < q <= 1) of sorted samples, by the
// nearest-rank method; 0 when there are none.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[rank(len(sorted), q)]
}

// rank is the index of the q-quantile of n sorted values (n > 0), by the
// nearest-rank method.
func rank(n int, q float64) int {
	return max(0, min(int(math.Ceil(q*float64(n)))-1, n-1))
}

func mean(samples []time.Duration) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range samples {
		sum += d
	}
	return sum / time.Duration(len(samples))
}

// fmtDur prints a duration with three significant digits in µs or ms.
func fmtDur(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	switch {
	case d == 0:
		return "0"
	case us < 1000:
		return sig3(us) + " µs"
	case us < 1e6:
		return sig3(us/1000) + " ms"
	default:
		return sig3(us/1e6) + " s"
	}
}

// sig3 formats v with three significant digits.
func sig3(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// fmtRate prints a rate with thousands separators.
func fmtRate(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// versus says which side is ahead and by how much. lower tells whether a
// lower value is better.
func versus(distlock, other float64, lower bool) string {
	if distlock <= 0 || other <= 0 {
		return "n/a"
	}
	r := distlock / other
	if !lower {
		r = other / distlock
	}
	switch {
	case r == 1:
		return "even"
	case r < 1:
		return fmt.Sprintf("distlock ahead, %sx", sig3(1/r))
	default:
		return fmt.Sprintf("other ahead, %sx", sig3(r))
	}
}

// fairness is max/min grants per waiter; +Inf when a waiter got none.
func fairness(perWaiter []int) (ratio float64, starved int) {
	if len(perWaiter) == 0 {
		return 0, 0
	}
	lo, hi := slices.Min(perWaiter), slices.Max(perWaiter)
	for _, n := range perWaiter {
		if n == 0 {
			starved++
		}
	}
	if lo == 0 {
		return math.Inf(1), starved
	}
	return float64(hi) / float64(lo), 0
}

// fmtFairness prints the worst round's max/min ratio.
func fmtFairness(ratios []float64, starved int) string {
	if len(ratios) == 0 {
		return "n/a"
	}
	if slices.Min(ratios) < 0 {
		return fmt.Sprintf("∞ (%d waiters had no grant)", starved)
	}
	return sig3(slices.Max(ratios))
}

// perUnit formats n/d with two decimals.
func perUnit(n int64, d int) string {
	if d == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(n)/float64(d))
}

// breakdown lists the largest per-unit counts, e.g. "evalsha 2.00, get 2.00".
func breakdown(byName map[string]int64, units int, limit int) string {
	if units == 0 || len(byName) == 0 {
		return ""
	}
	type kv struct {
		k string
		v int64
	}
	var kvs []kv
	for k, v := range byName {
		if v > 0 {
			kvs = append(kvs, kv{k, v})
		}
	}
	slices.SortFunc(kvs, func(a, b kv) int {
		if a.v != b.v {
			return int(b.v - a.v)
		}
		return strings.Compare(a.k, b.k)
	})
	var parts []string
	for i, e := range kvs {
		if i == limit {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", e.k, float64(e.v)/float64(units)))
	}
	return strings.Join(parts, ", ")
}

// pairedRatio compares two subjects of one service cycle by cycle: the
// quartiles of a[i]/b[i] over their turns (LatencyResult.Turns), where a
// turn ran each subject of the service once, one after the other. Noise
// that outlasts the time between a pair's two cycles (a spell of slow or
// fast round trips on this machine) then falls on both, where the ratio
// of the two p50s compares distributions that may each straddle the
// spells differently; a spell shorter than that falls on one cycle of
// the pair, and widens the quartiles. ok is false when the turns do not
// pair (missing, or of different lengths) or no pair has two times.
func pairedRatio(a, b []time.Duration) (q1, med, q3 float64, ok bool) {
	if len(a) == 0 || len(a) != len(b) {
		return 0, 0, 0, false
	}
	r := make([]float64, 0, len(a))
	for i := range a {
		if a[i] > 0 && b[i] > 0 {
			r = append(r, float64(a[i])/float64(b[i]))
		}
	}
	if len(r) == 0 {
		return 0, 0, 0, false
	}
	slices.Sort(r)
	at := func(q float64) float64 { return r[rank(len(r), q)] }
	return at(0.25), at(0.5), at(0.75), true
}
