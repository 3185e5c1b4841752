package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gateway"
)

// gw is a gateway served on a loopback port for one test.
type gw struct {
	t   *testing.T
	g   *gateway.Gateway
	url string
	hc  *http.Client
}

// start serves a gateway over b until the test ends.
func start(t *testing.T, b driver.Backend, opts ...gateway.Option) *gw {
	t.Helper()
	g, err := gateway.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		hc.CloseIdleConnections()
	})
	return &gw{t: t, g: g, url: "http://" + ln.Addr().String(), hc: hc}
}

// fileBackend is a file backend in a directory of the test's.
func fileBackend(t *testing.T) driver.Backend {
	t.Helper()
	b, err := filelock.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// answer is a decoded response.
type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

// str returns a string field of the answer.
func (a answer) str(k string) string { s, _ := a.body[k].(string); return s }

// num returns a number field of the answer.
func (a answer) num(k string) float64 { n, _ := a.body[k].(float64); return n }

// do sends a request with a JSON (or raw string) body and an optional
// bearer token.
func (g *gw) do(method, path, token string, body any) answer {
	g.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, g.url+path, rd)
	if err != nil {
		g.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
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

// want checks an answer's status and, for problems, its type and content
// type.
func (a answer) want(t *testing.T, status int, problemType string) answer {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d: %s", a.status, status, a.raw)
	}
	if problemType != "" {
		if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("Content-Type %q, want application/problem+json", ct)
		}
		if got := a.str("type"); got != problemType {
			t.Errorf("problem type %q, want %q: %s", got, problemType, a.raw)
		}
		if a.num("status") != float64(status) {
			t.Errorf("problem status %v, want %d", a.body["status"], status)
		}
	}
	return a
}

// session creates a session and returns its id.
func (g *gw) session(token, owner, ttl string) string {
	g.t.Helper()
	a := g.do("POST", "/v1/sessions", token, map[string]any{"owner": owner, "ttl": ttl}).want(g.t, 201, "")
	return a.str("id")
}

// acquire asks for name in session sid.
func (g *gw) acquire(token, sid, name, wait string) answer {
	g.t.Helper()
	return g.do("POST", "/v1/locks/"+esc(name)+"/acquire?wait="+wait, token, map[string]any{"session": sid})
}

// esc percent-encodes a name as a path segment.
func esc(name string) string {
	var sb strings.Builder
	for _, c := range []byte(name) {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' {
			sb.WriteByte(c)
		} else {
			sb.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[c>>4])+string("0123456789abcdef"[c&15])))
		}
	}
	return sb.String()
}

// waitFor polls cond (a local check, not the service) until it holds or
// the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// idle checks that the gateway holds no session, lock or waiting request.
func (g *gw) idle() {
	g.t.Helper()
	waitFor(g.t, 5*time.Second, "the gateway still holds something", func() bool {
		return g.g.Stats() == gateway.Stats{}
	})
}

// runE2E runs the Python client's e2e.py in mode against g, with the
// test's temporary directory and args after it, and returns what it
// printed; it fails the test, with Python's standard error, if e2e.py
// fails.
func runE2E(t *testing.T, g *gw, mode string, args ...string) []byte {
	t.Helper()
	dir, err := filepath.Abs("../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", append([]string{filepath.Join(dir, "e2e.py"), mode, g.url, t.TempDir()}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("python3 e2e.py %s: %v\n%s", mode, err, ee.Stderr)
		}
		t.Fatalf("python3 e2e.py %s: %v", mode, err)
	}
	return out
}
