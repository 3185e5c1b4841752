package bench

import (
	"testing"
	"time"
)

func TestOvertakes(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rec := func(g, asked, acquired int) holdRecord {
		return holdRecord{g: g, asked: at(asked), acquired: at(acquired), released: at(acquired + 1)}
	}
	for _, tc := range []struct {
		name  string
		holds []holdRecord
		want  int
	}{
		{"first in, first out", []holdRecord{rec(0, 0, 1), rec(1, 0, 3), rec(2, 0, 5), rec(0, 2, 7), rec(1, 4, 9), rec(2, 6, 11)}, 0},
		// Waiter 2 asked at 0 but was served after waiter 0 had been
		// served twice: waiter 0's second ask followed its grant at 0.
		{"a waiter served twice while another waits", []holdRecord{rec(0, 0, 1), rec(1, 0, 3), rec(0, 2, 5), rec(2, 0, 7)}, 1},
		// Nearly simultaneous first asks served in either order are no
		// sure pass.
		{"first asks in any order", []holdRecord{rec(2, 0, 1), rec(0, 0, 3), rec(1, 0, 5)}, 0},
		{"passed twice", []holdRecord{rec(0, 0, 1), rec(1, 0, 3), rec(0, 2, 5), rec(1, 4, 7), rec(2, 0, 9)}, 2},
	} {
		if got := overtakes(tc.holds); got != tc.want {
			t.Errorf("%s: overtakes = %d, want %d", tc.name, got, tc.want)
		}
	}
}
