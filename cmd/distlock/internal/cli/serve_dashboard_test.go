//go:build linux

package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/distlock/distlock/testserver"
)

// The dashboard of `distlock serve` names the lock service it serves, as
// --backend or $DISTLOCK_BACKEND gave it, without the password.
func TestServeDashboardNamesTheService(t *testing.T) {
	e := newEnv(t)
	const secret = "s3cretpw"
	r := testserver.StartRedis(t, testserver.WithRedisConfig("user alice on >"+secret+" ~* &* +@all"))
	cmd := e.command("serve", "--listen", "127.0.0.1:0")
	cmd.Env = append(cmd.Env, "DISTLOCK_BACKEND=redis://alice:"+secret+"@"+r.Addr+"/0")
	s := e.serveCmd(cmd)
	code, body := get(t, s.url+"/v1/dashboard")
	var d struct {
		Service struct{ Kind, URL string }
		Tokens  bool
	}
	if err := json.Unmarshal([]byte(body), &d); code != 200 || err != nil {
		t.Fatalf("GET /v1/dashboard: %d %q (%v)", code, body, err)
	}
	if d.Service.Kind != "redis" || !strings.HasSuffix(d.Service.URL, "@"+r.Addr+"/0") || d.Tokens {
		t.Errorf("GET /v1/dashboard: service %+v, tokens %v; want redis at %s, no tokens", d.Service, d.Tokens, r.Addr)
	}
	if strings.Contains(body, secret) {
		t.Errorf("the password is in the dashboard's data: %s", body)
	}
}
