package gateway_test

import (
	"testing"
	"time"
)

// A blocking read of a lock the gateway has no event of answers index 0;
// passed back, that index waits for the first change like any other,
// instead of answering at once (which had a client that follows the
// protocol poll in a loop).
func TestBlockingReadAtIndexZeroWaits(t *testing.T) {
	g := start(t, fileBackend(t))
	r := g.do("GET", "/v1/locks/z", "", nil).want(t, 200, "")
	if r.str("index") != "0" {
		t.Fatalf("index of a lock never held: %s", r.raw)
	}
	got := make(chan answer, 1)
	go func() { got <- g.do("GET", "/v1/locks/z?wait=30s&index="+r.str("index"), "", nil) }()
	waitFor(t, 10*time.Second, "the read does not wait", func() bool { return g.g.Stats().Waiting == 1 })
	select {
	case a := <-got:
		t.Fatalf("answered before a change: %s", a.raw)
	default:
	}
	a := g.session("", "alice", "10s")
	tok := g.acquire("", a, "z", "0").want(t, 200, "").str("token")
	after := (<-got).want(t, 200, "")
	if h, _ := after.body["holder"].(map[string]any); after.body["held"] != true || h["token"] != tok {
		t.Errorf("after the grant: %s", after.raw)
	}
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.idle()
}
