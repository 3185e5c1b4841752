package gateway_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock/gateway"
)

// Once a closing gateway has released a session's locks, that session's
// keepalive is answered 404 (the session ended), not 503: a client takes
// 503 for a busy gateway and goes on treating its locks as held.
func TestClosingGatewayEndsSessions(t *testing.T) {
	g := start(t, fileBackend(t))
	s := g.session("", "a", "1m")
	g.acquire("", s, "k", "0").want(t, 200, "")
	if err := g.g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.do("POST", "/v1/sessions/"+s+"/keepalive?wait=0", "", nil).want(t, 404, gateway.ProblemSessionNotFound)
}
