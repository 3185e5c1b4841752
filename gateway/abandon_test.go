package gateway_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/gateway"
)

// An acquirer that gave up abandons its acquire: the wait at the gateway
// ends (its request answers), and once the abandon has answered nothing of
// the session is pending or held on the name, so the holder's release
// grants nobody in that session. A grant made before the abandon is
// released by it, whatever its token.
func TestAbandonEndsTheWaitAndReleasesTheGrant(t *testing.T) {
	g := start(t, fileBackend(t))
	a, b := g.session("", "a", "1m"), g.session("", "b", "1m")
	tok := g.acquire("", a, "t", "0").want(t, 200, "").str("token")
	got := make(chan answer, 1)
	go func() { got <- g.acquire("", b, "t", "1m") }()
	waitFor(t, 10*time.Second, "the acquire waits", func() bool { return g.g.Stats().Waiting == 1 })
	g.do("POST", "/v1/locks/t/abandon", "", map[string]any{"session": b}).want(t, 204, "")
	select {
	case ans := <-got:
		ans.want(t, 409, gateway.ProblemNotAcquired)
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned acquire still waits after 10s")
	}
	g.do("POST", "/v1/locks/t/release", "", map[string]any{"session": a, "token": tok}).want(t, 200, "")
	// Free, and not b's: a third session gets it at once.
	c := g.session("", "c", "1m")
	g.acquire("", c, "t", "0").want(t, 200, "")
	g.do("DELETE", "/v1/sessions/"+c, "", nil).want(t, 204, "")

	// A grant of b's made before the abandon: released.
	g.acquire("", b, "u", "0").want(t, 200, "")
	g.do("POST", "/v1/locks/u/abandon", "", map[string]any{"session": b}).want(t, 204, "")
	g.acquire("", a, "u", "0").want(t, 200, "")
	// Nothing to abandon: still 204.
	g.do("POST", "/v1/locks/v/abandon", "", map[string]any{"session": b}).want(t, 204, "")
	g.do("POST", "/v1/locks/v/abandon", "", map[string]any{"session": "nope"}).want(t, 404, "")
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
	g.idle()
}

// An abandon also ends a retry of the abandoned acquire that waits for
// its outcome (the same session and name, sent again when the first
// answer was lost on the way): the retry must not start a wait of its
// own once the first one ended, or the holder's release would grant the
// lock to the session after its abandon answered.
func TestAbandonEndsARetriedAcquire(t *testing.T) {
	g := start(t, fileBackend(t))
	a, b := g.session("", "a", "1m"), g.session("", "b", "1m")
	tok := g.acquire("", a, "t", "0").want(t, 200, "").str("token")
	got := make(chan answer, 2)
	go func() { got <- g.acquire("", b, "t", "1m") }()
	waitFor(t, 10*time.Second, "the acquire waits", func() bool { return g.g.Stats().Waiting == 1 })
	go func() { got <- g.acquire("", b, "t", "1m") }()
	waitFor(t, 10*time.Second, "its retry waits", func() bool { return g.g.Stats().Waiting == 2 })
	g.do("POST", "/v1/locks/t/abandon", "", map[string]any{"session": b}).want(t, 204, "")
	for range 2 {
		select {
		case ans := <-got:
			ans.want(t, 409, gateway.ProblemNotAcquired)
		case <-time.After(10 * time.Second):
			t.Fatal("an abandoned acquire still waits after 10s")
		}
	}
	g.do("POST", "/v1/locks/t/release", "", map[string]any{"session": a, "token": tok}).want(t, 200, "")
	c := g.session("", "c", "1m")
	g.acquire("", c, "t", "0").want(t, 200, "")
	for _, s := range []string{a, b, c} {
		g.do("DELETE", "/v1/sessions/"+s, "", nil).want(t, 204, "")
	}
	g.idle()
}
