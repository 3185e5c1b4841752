package bench

import (
	"fmt"
	"strings"
)

// Thresholds of the Redlock goals. A cycle over 5 nodes sends its requests
// in parallel, so it should cost little more than over one: at most 1.5x
// (the bound of the Redis hand-off goal). A hand-off without a herd is a
// release round (one request per node) and the next holder's acquire
// round (one per node); redlockRoundsPerGrant allows one more round per
// grant, for the waiter's subscription and a lost race, and is judged per
// grant, as the Redis fair-mode goal is. A herd costs a round per woken
// waiter, so it grows with the waiters and exceeds this at 16 already.
const (
	redlockCycleLimit     = 1.5
	redlockRoundsPerGrant = 3
	redlockNodes          = 5
)

// redlockGoals are the Redlock targets: the 5-node cycle no slower than
// redsync's over the same servers and at most 1.5x the package over one
// node, and hand-offs without a herd.
func (rp *Report) redlockGoals() []Goal {
	peer := rp.cycleGoal("distlock Redlock (5 nodes, Client.Acquire) p50 no slower than redsync's over the same 5 servers, while issuing a fencing token",
		"distlock-redlock", "redsync5", 1, false)
	one := rp.cycleGoal(fmt.Sprintf("distlock Redlock p50 over 5 nodes at most %sx over 1 node (the fan-out in parallel)", sig3(redlockCycleLimit)),
		"distlock-redlock", "distlock-redlock-1", redlockCycleLimit, false)

	limit := redlockRoundsPerGrant * redlockNodes
	h := Goal{Text: fmt.Sprintf("distlock Redlock (5 nodes) hand-off without a herd: at most %d requests per grant (%d rounds of one request per node) at every number of waiters",
		limit, redlockRoundsPerGrant), Met: true}
	var parts []string
	for _, n := range rp.Res.Params.ContentionWaiters {
		cr := rp.Res.Contention[n]["distlock-redlock"]
		if cr == nil || cr.Handoffs == 0 || cr.Grants == 0 {
			continue
		}
		h.Judged = true
		ok := cr.Delta.Requests <= int64(limit)*int64(cr.Grants)
		h.Met = h.Met && ok
		parts = append(parts, fmt.Sprintf("%d waiters: %.1f requests per grant, %.1f per hand-off (%s; %d requests, %d hand-offs in %d grants)%s",
			n, float64(cr.Delta.Requests)/float64(cr.Grants), float64(cr.Delta.Requests)/float64(cr.Handoffs),
			breakdownRequests(cr.Delta, cr.Handoffs), cr.Delta.Requests, cr.Handoffs, cr.Grants, missed(ok)))
	}
	h.Measured = strings.Join(parts, "; ")
	return []Goal{peer, one, h}
}
