package gateway_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"strconv"
	"testing"

	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

// A session keeps its 256 newest events for its next keepalive: past them
// the oldest are dropped, and the keepalive says how many in
// events_dropped (once: the next keepalive says nothing of them).
func TestKeepaliveCountsDroppedEvents(t *testing.T) {
	const locks, kept = 260, 256
	mb := memlock.New()
	t.Cleanup(func() { mb.Close() })
	g := start(t, mb, gateway.WithMaxLocks(locks), gateway.WithForceWithoutTokens())
	s := g.session("", "dropped", "60s")
	tokens := make([]string, locks)
	for i := range locks {
		tokens[i] = g.acquire("", s, fmt.Sprintf("jobs/%d", i), "0").want(t, 200, "").str("token")
	}
	// Each forced release takes a lock from the session: a lock_lost
	// event each, with no keepalive between them.
	for i := range locks {
		g.do("POST", "/v1/locks/"+url.PathEscape(fmt.Sprintf("jobs/%d", i))+"/release", "", map[string]any{"force": true}).want(t, 200, "")
	}
	ka := g.do("POST", "/v1/sessions/"+s+"/keepalive?wait=0ms", "", nil).want(t, 200, "")
	events, _ := ka.body["events"].([]any)
	if n := ka.num("events_dropped"); n != locks-kept {
		t.Errorf("events_dropped %v, want %d", ka.body["events_dropped"], locks-kept)
	}
	if len(events) != kept {
		t.Fatalf("%d events, want the %d newest", len(events), kept)
	}
	for i, e := range events {
		m := e.(map[string]any)
		if want := tokens[locks-kept+i]; m["type"] != "lock_lost" || m["token"] != want || m["reason"] != "forced_release" {
			t.Fatalf("event %d: %v, want the lock_lost of token %s, reason forced_release", i, m, want)
		}
	}
	ka = g.do("POST", "/v1/sessions/"+s+"/keepalive?wait=0ms", "", nil).want(t, 200, "")
	if evs, _ := ka.body["events"].([]any); len(evs) != 0 || ka.body["events_dropped"] != nil {
		t.Errorf("the next keepalive: events %v, events_dropped %v; want none", evs, ka.body["events_dropped"])
	}
	g.do("DELETE", "/v1/sessions/"+s, "", nil).want(t, 204, "")
	g.idle()
}

// The Python client counts the events the gateway dropped, and reports a
// lock whose loss was told in one of them lost with the reason
// "event_dropped" (it reported "not_held").
func TestPythonClientDroppedEvents(t *testing.T) {
	const locks, kept = 260, 256
	mb := memlock.New()
	t.Cleanup(func() { mb.Close() })
	g := start(t, mb, gateway.WithMaxLocks(locks), gateway.WithForceWithoutTokens())
	out := runE2E(t, g, "dropped", strconv.Itoa(locks))
	var got struct {
		EventsDropped int            `json:"events_dropped"`
		Events        int            `json:"events"`
		Reasons       map[string]int `json:"reasons"`
		Told          map[string]int `json:"told"`
		Valid         int            `json:"valid"`
		FirstKept     bool           `json:"first_kept"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]int{"forced_release": kept, "event_dropped": locks - kept}
	if got.EventsDropped != locks-kept || got.Events != kept || !got.FirstKept || got.Valid != 0 ||
		!maps.Equal(got.Reasons, want) || !maps.Equal(got.Told, want) {
		t.Errorf("got %s; want %d events dropped, the %d newest kept, every lock lost and told, with reasons %v", out, locks-kept, kept, want)
	}
	g.idle()
}
