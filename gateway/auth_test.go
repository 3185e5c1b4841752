package gateway_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distlock/distlock/gateway"
)

const (
	jobsSecret  = "jobs-secret-0123456789"
	otherSecret = "other-secret-0123456789"
	adminSecret = "admin-secret-0123456789"
)

func authGateway(t *testing.T) *gw {
	t.Helper()
	tokens, err := gateway.ParseTokens([]byte(`{"tokens":[
		{"name":"jobs","token":"` + jobsSecret + `","prefixes":["jobs/"]},
		{"name":"other","token":"` + otherSecret + `","prefixes":["other/", "jobs/shared"]},
		{"name":"admin","token":"` + adminSecret + `","prefixes":[""],"admin":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return start(t, fileBackend(t), gateway.WithTokens(tokens))
}

func TestAuthRefusals(t *testing.T) {
	g := authGateway(t)
	// No token, a malformed header, an unknown token.
	a := g.do("POST", "/v1/sessions", "", map[string]any{}).want(t, 401, gateway.ProblemUnauthorized)
	if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
		t.Errorf("WWW-Authenticate %q", a.header.Get("WWW-Authenticate"))
	}
	g.do("POST", "/v1/sessions", "not-a-token-of-this-gateway", map[string]any{}).want(t, 401, gateway.ProblemUnauthorized)
	g.do("POST", "/v1/sessions", jobsSecret[:len(jobsSecret)-1], map[string]any{}).want(t, 401, gateway.ProblemUnauthorized)

	sid := g.session(jobsSecret, "j", "10s")
	// A name outside the token's prefixes.
	g.acquire(jobsSecret, sid, "other/x", "0").want(t, 403, gateway.ProblemForbidden)
	g.do("POST", "/v1/locks/other%2Fx/check", jobsSecret, map[string]any{"token": "1"}).want(t, 403, gateway.ProblemForbidden)
	tok := g.acquire(jobsSecret, sid, "jobs/shared", "0").want(t, 200, "").str("token")
	// Another token cannot use, nor even see, the session.
	g.do("POST", "/v1/sessions/"+sid+"/keepalive", otherSecret, nil).want(t, 404, gateway.ProblemSessionNotFound)
	g.do("DELETE", "/v1/sessions/"+sid, otherSecret, nil).want(t, 404, gateway.ProblemSessionNotFound)
	g.do("POST", "/v1/locks/jobs%2Fshared/release", otherSecret, map[string]any{"session": sid, "token": tok}).
		want(t, 404, gateway.ProblemSessionNotFound)
	// Forced release is for admins only.
	g.do("POST", "/v1/locks/jobs%2Fshared/release", otherSecret, map[string]any{"force": true}).want(t, 403, gateway.ProblemForbidden)
	g.do("POST", "/v1/locks/jobs%2Fshared/release", jobsSecret, map[string]any{"force": true}).want(t, 403, gateway.ProblemForbidden)
	if s := g.g.Stats(); s.Locks != 1 {
		t.Fatalf("a refused request released the lock: %+v", s)
	}
	// The admin may.
	g.do("POST", "/v1/sessions/"+sid+"/keepalive", adminSecret, nil).want(t, 200, "")
	g.do("POST", "/v1/locks/jobs%2Fshared/release", adminSecret, map[string]any{"force": true, "token": tok}).want(t, 200, "")
	// The OpenAPI document and the health check need no token.
	g.do("GET", "/v1/openapi.json", "", nil).want(t, 200, "")
	g.do("GET", "/healthz", "", nil).want(t, 200, "")
	g.do("DELETE", "/v1/sessions/"+sid, jobsSecret, nil).want(t, 204, "")
	g.idle()
}

func TestParseTokensRefusesBadFiles(t *testing.T) {
	const secret = "s3cr3t-value-0123456789"
	for name, in := range map[string]string{
		"not JSON":       `{"tokens": [` + secret,
		"no tokens":      `{"tokens": []}`,
		"unknown field":  `{"tokens": [{"name":"a","token":"` + secret + `","prefixes":[""],"scope":"x"}]}`,
		"no name":        `{"tokens": [{"token":"` + secret + `","prefixes":[""]}]}`,
		"short secret":   `{"tokens": [{"name":"a","token":"short","prefixes":[""]}]}`,
		"no prefixes":    `{"tokens": [{"name":"a","token":"` + secret + `"}]}`,
		"same name":      `{"tokens": [{"name":"a","token":"` + secret + `","prefixes":[""]},{"name":"a","token":"x` + secret + `","prefixes":[""]}]}`,
		"same secret":    `{"tokens": [{"name":"a","token":"` + secret + `","prefixes":[""]},{"name":"b","token":"` + secret + `","prefixes":[""]}]}`,
		"secret as list": `{"tokens": [{"name":"a","token":["` + secret + `"],"prefixes":[""]}]}`,
	} {
		_, err := gateway.ParseTokens([]byte(in))
		if !errors.Is(err, gateway.ErrTokens) {
			t.Errorf("%s: %v, want ErrTokens", name, err)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "short\"") {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
}

// A token file that other users of the host may read or change is
// refused, as ssh refuses such a private key: they could read the admin
// secret, or write their own token. One that belongs to another user
// (not root) is refused whatever its mode: its owner may change it. Its
// error names the file and its mode, or its owner, and never a secret.
// Its group may read it (a service's group).
func TestReadTokensRefusesOpenFiles(t *testing.T) {
	const (
		secret = "file-secret-0123456789"
		nobody = 65534
	)
	data := []byte(`{"tokens":[{"name":"a","token":"` + secret + `","prefixes":[""]}]}`)
	for _, tc := range []struct {
		mode  os.FileMode
		owner int // 0: this process's user
		ok    bool
	}{
		{mode: 0o600, ok: true}, {mode: 0o400, ok: true}, {mode: 0o640, ok: true}, {mode: 0o440, ok: true},
		{mode: 0o644}, {mode: 0o604}, {mode: 0o602}, {mode: 0o666}, {mode: 0o620},
		{mode: 0o600, owner: nobody}, {mode: 0o400, owner: nobody},
	} {
		name := fmt.Sprintf("%04o", tc.mode)
		if tc.owner != 0 {
			name += fmt.Sprintf(" uid %d", tc.owner)
		}
		t.Run(name, func(t *testing.T) {
			if tc.owner != 0 && os.Getuid() != 0 {
				t.Skip("giving a file to another user (chown) needs root")
			}
			path := filepath.Join(t.TempDir(), "tokens.json")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil { // (WriteFile's mode passes the umask)
				t.Fatal(err)
			}
			said := fmt.Sprintf("%04o", tc.mode)
			if tc.owner != 0 {
				if err := os.Chown(path, tc.owner, tc.owner); err != nil {
					t.Fatal(err)
				}
				said = fmt.Sprintf("user %d", tc.owner)
			}
			_, err := gateway.ReadTokens(path)
			switch {
			case tc.ok && err != nil:
				t.Fatalf("ReadTokens: %v", err)
			case tc.ok:
			case err == nil:
				t.Fatal("ReadTokens accepted the file")
			case !errors.Is(err, gateway.ErrTokens) || !strings.Contains(err.Error(), path) ||
				!strings.Contains(err.Error(), said) || strings.Contains(err.Error(), secret):
				t.Errorf("error %q: want ErrTokens, the path, %q, and no secret", err, said)
			}
		})
	}
}
