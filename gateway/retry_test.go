package gateway_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock/gateway"
)

// A try (wait=0) of a name whose acquire is waiting in the same session
// answers at once that the lock is held: it neither waits for the other
// acquire's outcome nor, uncounted, holds a request past WithMaxWaiting.
func TestTryDuringRetriedWaitAnswersAtOnce(t *testing.T) {
	g := start(t, fileBackend(t))
	a, b := g.session("", "a", "1m"), g.session("", "b", "1m")
	tok := g.acquire("", a, "t", "0").want(t, 200, "").str("token")
	got := make(chan answer, 1)
	go func() { got <- g.acquire("", b, "t", "20s") }()
	waitFor(t, 10*time.Second, "the acquire does not wait", func() bool { return g.g.Stats().Waiting == 1 })
	g.acquire("", b, "t", "0").want(t, 409, gateway.ProblemNotAcquired)
	// The try answered while the first acquire still waits: a release now
	// grants it.
	g.do("POST", "/v1/locks/t/release", "", map[string]any{"session": a, "token": tok}).want(t, 200, "")
	(<-got).want(t, 200, "")
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
	g.idle()
}
