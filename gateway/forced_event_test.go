package gateway_test

import (
	"sync"
	"testing"

	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

// TestKeepaliveDuringForcedReleaseSaysWhy: a keepalive answered while a
// forced release is under way (the session no longer holds the lock, the
// lock service has not released it yet) carries the lock's
// forced_release event. It once answered with the lock merely gone, the
// event following a moment later, and the Python client took the answer
// for a loss of its own and reported it as "not_held" (a CI failure of
// TestPythonClientWalk).
func TestKeepaliveDuringForcedReleaseSaysWhy(t *testing.T) {
	g := start(t, memlock.New(), gateway.WithForceWithoutTokens())
	dropped, gate := make(chan struct{}), make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release) // a failed test does not leave the gateway in the hook
	gateway.SetDropped(g.g, func() {
		dropped <- struct{}{}
		<-gate
	})
	a := g.session("", "a", "10s")
	tok := g.acquire("", a, "jobs/x", "0").want(t, 200, "").str("token")
	released := make(chan answer, 1)
	go func() { released <- g.doAsync("POST", "/v1/locks/jobs%2Fx/release", map[string]any{"force": true}) }()
	select {
	case <-dropped: // the session gave the lock up; the service has not released it
	case r := <-released:
		t.Fatalf("the forced release answered before it took the lock from the session: status %d: %s", r.status, r.raw)
	}
	ka := g.do("POST", "/v1/sessions/"+a+"/keepalive?wait=0ms", "", nil)
	release()
	if r := <-released; r.status != 200 {
		t.Fatalf("forced release: status %d: %s", r.status, r.raw)
	}
	ka.want(t, 200, "")
	locks, _ := ka.body["locks"].([]any)
	events, _ := ka.body["events"].([]any)
	var lost []map[string]any
	for _, e := range events {
		if m := e.(map[string]any); m["type"] == "lock_lost" {
			lost = append(lost, m)
		}
	}
	switch {
	case len(locks) != 0:
		t.Errorf("the keepalive says the session holds %v after the forced release took the lock", locks)
	case len(lost) != 1 || lost[0]["reason"] != "forced_release" || lost[0]["token"] != tok:
		t.Errorf("the keepalive answers without the lock, with events %v: want one lock_lost of token %s, reason forced_release", events, tok)
	}
	// Reported once: the next keepalive has no event left.
	ka = g.do("POST", "/v1/sessions/"+a+"/keepalive?wait=0ms", "", nil).want(t, 200, "")
	if evs, _ := ka.body["events"].([]any); len(evs) != 0 {
		t.Errorf("the next keepalive has events %v, want none", evs)
	}
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.idle()
}
