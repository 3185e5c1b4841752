package partition

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func members(n int) []string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = fmt.Sprintf("worker-%d", i)
	}
	return ms
}

func counts(a map[string]string) map[string]int {
	c := map[string]int{}
	for _, m := range a {
		c[m]++
	}
	return c
}

func moved(a, b map[string]string) int {
	n := 0
	for u, m := range a {
		if b[u] != m {
			n++
		}
	}
	return n
}

func TestAssignBalanced(t *testing.T) {
	for _, nu := range []int{1, 7, 64, 100, 1000} {
		for nm := 1; nm <= 20; nm++ {
			units := Count(nu)
			a := Assign("g", members(nm), units)
			if len(a) != nu {
				t.Fatalf("%d units, %d members: %d assigned", nu, nm, len(a))
			}
			c := counts(a)
			lo, hi := nu, 0
			for _, m := range members(nm) {
				lo, hi = min(lo, c[m]), max(hi, c[m])
			}
			if hi-lo > 1 {
				t.Fatalf("%d units, %d members: shares %d to %d", nu, nm, lo, hi)
			}
		}
	}
}

func TestAssignDeterministic(t *testing.T) {
	ms, us := members(8), Count(64)
	a := Assign("g", ms, us)
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		ms2 := append([]string(nil), ms...)
		us2 := append([]string(nil), us...)
		r.Shuffle(len(ms2), func(i, j int) { ms2[i], ms2[j] = ms2[j], ms2[i] })
		r.Shuffle(len(us2), func(i, j int) { us2[i], us2[j] = us2[j], us2[i] })
		ms2 = append(ms2, ms2[0]) // a duplicate counts once
		if m := moved(a, Assign("g", ms2, us2)); m != 0 {
			t.Fatalf("order changed %d units' members", m)
		}
	}
	if m := moved(a, Assign("other", ms, us)); m == 0 {
		t.Fatalf("another group got the same assignment")
	}
	if a := Assign("g", nil, us); len(a) != 0 {
		t.Fatalf("no members: %v", a)
	}
}

// TestAssignMovesFew measures how many units a join or a leave moves: the
// ideal is the joiner's share, or the leaver's.
func TestAssignMovesFew(t *testing.T) {
	for _, nu := range []int{64, 256, 4096} {
		sumJoin, sumLeave, sumIdeal := 0, 0, 0
		for nm := 2; nm <= 16; nm++ {
			us := Count(nu)
			before := Assign("g", members(nm), us)
			after := Assign("g", members(nm+1), us)
			ideal := nu / (nm + 1)
			join := moved(before, after)
			// A leave of a member in the middle of the list.
			left := append(members(nm)[:nm/2:nm/2], members(nm)[nm/2+1:]...)
			leave := moved(before, Assign("g", left, us))
			if limit := 2*ideal + nm; join > limit || leave > 2*(nu/nm)+nm {
				t.Errorf("%d units, %d members: a join moved %d (ideal %d), a leave %d (ideal %d)", nu, nm, join, ideal, leave, nu/nm)
			}
			sumJoin, sumLeave, sumIdeal = sumJoin+join, sumLeave+leave, sumIdeal+ideal
			t.Logf("%d units, %d members: a join moves %d (ideal %d), a leave %d (ideal %d)", nu, nm, join, ideal, leave, nu/nm)
		}
		t.Logf("%d units, joins from 2 to 16 members: %d moved, ideal %d", nu, sumJoin, sumIdeal)
		// With many units per member, the moves are close to the ideal.
		if nu == 4096 && sumJoin > sumIdeal*115/100 {
			t.Errorf("%d units: joins moved %d in all, more than 1.15 times the ideal %d", nu, sumJoin, sumIdeal)
		}
	}
}

func BenchmarkAssign(b *testing.B) {
	for _, nm := range []int{8, 64, 256} {
		b.Run(fmt.Sprintf("65536x%d", nm), func(b *testing.B) {
			ms, us := members(nm), Count(MaxUnits)
			for b.Loop() {
				Assign("g", ms, us)
			}
		})
	}
}
