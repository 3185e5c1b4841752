package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/distlock/distlock/gateway"
)

// send sends a request with exactly the given headers.
func (g *gw) send(method, path, body string, header map[string]string) answer {
	g.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, g.url+path, rd)
	if err != nil {
		g.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: raw}
	json.Unmarshal(raw, &a.body)
	return a
}

// A request that changes something must be JSON sent as such, and not
// come from a web page of another origin, as a browser tells it
// (Sec-Fetch-Site, or else Origin); programs send neither header. Reads
// are answered to anyone: a page of another origin cannot read the
// answer.
func TestRequestsOfOtherOriginsAreRefused(t *testing.T) {
	g := start(t, fileBackend(t))
	host := strings.TrimPrefix(g.url, "http://")
	const create = `{"owner":"o","ttl":"10s"}`
	const js = "application/json"
	cases := []struct {
		name         string
		method, path string
		body         string
		header       map[string]string
		status       int
	}{
		{"a program", "POST", "/v1/sessions", create, map[string]string{"Content-Type": js}, 201},
		{"a program, JSON with a charset", "POST", "/v1/sessions", create, map[string]string{"Content-Type": js + "; charset=utf-8"}, 201},
		{"no Content-Type", "POST", "/v1/sessions", create, nil, 415},
		{"text/plain", "POST", "/v1/sessions", create, map[string]string{"Content-Type": "text/plain"}, 415},
		{"a form", "POST", "/v1/sessions", create, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"the dashboard (same origin)", "POST", "/v1/sessions", create, map[string]string{"Content-Type": js, "Sec-Fetch-Site": "same-origin", "Origin": g.url}, 201},
		{"typed by the user", "POST", "/v1/sessions", create, map[string]string{"Content-Type": js, "Sec-Fetch-Site": "none"}, 201},
		{"same Origin, no Sec-Fetch-Site", "POST", "/v1/sessions", create, map[string]string{"Content-Type": js, "Origin": "http://" + host}, 201},
		{"another port of this host", "POST", "/v1/sessions", create, map[string]string{"Content-Type": js, "Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"}, 403},
		{"another site", "POST", "/v1/sessions", create, map[string]string{"Content-Type": js, "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, 403},
		{"another Origin, no Sec-Fetch-Site", "POST", "/v1/sessions", create, map[string]string{"Content-Type": js, "Origin": "https://evil.example"}, 403},
		{"an opaque Origin", "POST", "/v1/sessions", create, map[string]string{"Content-Type": js, "Origin": "null"}, 403},
		{"a keepalive from another site", "POST", "/v1/sessions/x.y/keepalive", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"a deletion from another site", "DELETE", "/v1/sessions/x.y", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"a read from another site", "GET", "/v1/locks", "", map[string]string{"Sec-Fetch-Site": "cross-site"}, 200},
	}
	created := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := g.send(tc.method, tc.path, tc.body, tc.header)
			if a.status != tc.status {
				t.Fatalf("status %d, want %d: %s", a.status, tc.status, a.raw)
			}
			switch tc.status {
			case 403:
				a.want(t, 403, gateway.ProblemForbidden)
			case 415:
				a.want(t, 415, gateway.ProblemUnsupportedMedia)
			case 201:
				created++
			}
		})
	}
	if n := g.g.Stats().Sessions; n != created {
		t.Errorf("%d sessions, want the %d created by the allowed requests", n, created)
	}
}
