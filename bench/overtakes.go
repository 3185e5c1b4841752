package bench

import "time"

// overtakes counts, in a round's grants sorted by acquisition, the times a
// waiter was passed: granted the key after another waiter that asked for
// it after this one did. Only sure passes count: the other waiter's
// previous grant came after this one asked, so the other asked again
// after that grant (at least a hold later), whatever the order in which
// two nearly simultaneous Lock calls reached the service. A first-in,
// first-out queue whose waiters all ask again at once has none; a waiter
// that lost its place in the queue, or came back to it late, is passed by
// every waiter that asked meanwhile. Unlike max/min grants per waiter, the
// count does not depend on when the round is cut.
func overtakes(holds []holdRecord) int {
	prev := make([]time.Time, len(holds)) // the waiter's previous grant, zero for its first
	last := map[int]time.Time{}
	for i, h := range holds {
		prev[i] = last[h.g]
		last[h.g] = h.acquired
	}
	n := 0
	for i, h := range holds {
		for j := i - 1; j >= 0 && holds[j].acquired.After(h.asked); j-- {
			if holds[j].g != h.g && prev[j].After(h.asked) {
				n++
			}
		}
	}
	return n
}
