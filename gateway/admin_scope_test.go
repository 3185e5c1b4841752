package gateway_test

import (
	"testing"

	"github.com/distlock/distlock/gateway"
)

// An admin token limited to some prefixes may not use another token's
// session: deleting it would release, and a keepalive would show, locks
// outside the admin's prefixes.
func TestPrefixedAdminCannotUseOtherSessions(t *testing.T) {
	const opsSecret = "ops-secret-0123456789"
	tokens, err := gateway.ParseTokens([]byte(`{"tokens":[
		{"name":"jobs","token":"` + jobsSecret + `","prefixes":["jobs/"]},
		{"name":"ops","token":"` + opsSecret + `","prefixes":["ops/"],"admin":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, fileBackend(t), gateway.WithTokens(tokens))
	sid := g.session(jobsSecret, "j", "10s")
	tok := g.acquire(jobsSecret, sid, "jobs/x", "0").want(t, 200, "").str("token")
	g.do("POST", "/v1/sessions/"+sid+"/keepalive", opsSecret, nil).want(t, 404, gateway.ProblemSessionNotFound)
	g.do("DELETE", "/v1/sessions/"+sid, opsSecret, nil).want(t, 404, gateway.ProblemSessionNotFound)
	g.do("POST", "/v1/locks/jobs%2Fx/release", opsSecret, map[string]any{"force": true, "token": tok}).
		want(t, 403, gateway.ProblemForbidden)
	if s := g.g.Stats(); s.Locks != 1 || s.Sessions != 1 {
		t.Fatalf("a refused request ended the session or its lock: %+v", s)
	}
	g.do("DELETE", "/v1/sessions/"+sid, jobsSecret, nil).want(t, 204, "")
	g.idle()
}
