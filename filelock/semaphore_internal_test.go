//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import "testing"

// A waiter's watch wakes the first in line for its slots and the key's
// lock file alone, a later one for the waiter before it alone, and any
// waiter, while it tries, for every file of its semaphore but the
// semaphore's flock file (every try opens it): never for another key's
// files, nor for the temporary file of the state.
func TestSemWatchMatch(t *testing.T) {
	w := &semWatch{name: "k"}
	entries := []string{"k.slot.0", "k.slot.12", "k.lock", "k.wait.3", "k.wait.4", "k.sem.json",
		"k.sem", "k.sem.tmp", "k.info", "k.slot.x", "k.slot.", "k.wait.3.lock", "k2.slot.0", "kk.lock", "j.wait.3"}
	for _, tc := range []struct {
		what int
		pred uint64
		want []string
	}{
		{semWatchAll, 0, []string{"k.slot.0", "k.slot.12", "k.lock", "k.wait.3", "k.wait.4", "k.sem.json"}},
		{semWatchFirst, 0, []string{"k.slot.0", "k.slot.12", "k.lock"}},
		{semWatchPred, 3, []string{"k.wait.3"}},
	} {
		w.set(tc.what, tc.pred)
		for _, e := range entries {
			want := false
			for _, x := range tc.want {
				want = want || x == e
			}
			if got := w.match(e); got != want {
				t.Errorf("watch %d (pred %d): match(%q) = %v, want %v", tc.what, tc.pred, e, got, want)
			}
		}
	}
}
