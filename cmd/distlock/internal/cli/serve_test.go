//go:build linux

package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gatewaylock"
	"github.com/distlock/distlock/testserver"
)

// serving is a running `distlock serve`.
type serving struct {
	*started
	url string
}

var servingLine = regexp.MustCompile(`on (https?://[0-9.:]+) `)

// serve starts `distlock serve` on a free loopback port and waits until
// it says where it listens.
func (e *env) serve(args ...string) *serving {
	e.t.Helper()
	return e.serveCmd(e.command(append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...))
}

// serveCmd starts cmd, a `distlock serve`, and waits until it says where
// it listens.
func (e *env) serveCmd(cmd *exec.Cmd) *serving {
	e.t.Helper()
	s := e.start(cmd)
	end := time.Now().Add(time.Minute)
	for time.Now().Before(end) {
		if m := servingLine.FindStringSubmatch(s.stderr.String()); m != nil {
			return &serving{started: s, url: m[1]}
		}
		if s.cmd.ProcessState != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("serve did not start: %s", s.stderr)
	return nil
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestServeRefusesOtherInterfacesWithoutTokens(t *testing.T) {
	e := newEnv(t)
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		r := e.run("serve", "--listen", addr)
		if r.code != 64 || !strings.Contains(r.stderr, "--tokens") {
			t.Errorf("serve --listen %s: exit %d, stderr %q; want 64 and a word on --tokens", addr, r.code, r.stderr)
		}
	}
}

func TestServeRefusesBadTokenFile(t *testing.T) {
	e := newEnv(t)
	const secret = "a-secret-that-must-not-show"
	path := e.path("tokens.json")
	os.WriteFile(path, []byte(`{"tokens":[{"name":"a","token":"`+secret+`","prefixes":[""],"scopes":1}]}`), 0o600)
	r := e.run("serve", "--tokens", path)
	if r.code != 64 || strings.Contains(r.stderr, secret) || !strings.Contains(r.stderr, "token file") {
		t.Errorf("exit %d, stderr %q; want 64, a word on the token file, and no secret", r.code, r.stderr)
	}
}

// A token file that every user of the host may read is refused, with
// its name and mode; so is --allow-force-release with tokens, where the
// admin scope decides.
func TestServeRefusesOpenTokenFile(t *testing.T) {
	e := newEnv(t)
	const secret = "a-secret-that-must-not-show"
	path := e.path("tokens.json")
	if err := os.WriteFile(path, []byte(`{"tokens":[{"name":"a","token":"`+secret+`","prefixes":[""]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	// (A --listen that serve would refuse after reading the tokens: a
	// file read without complaint ends serve at once too.)
	r := e.run("serve", "--listen", "no-port", "--tokens", path)
	if r.code != 64 || strings.Contains(r.stderr, secret) || !strings.Contains(r.stderr, path+" has mode 0644") {
		t.Errorf("exit %d, stderr %q; want 64, the file and its mode, and no secret", r.code, r.stderr)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	r = e.run("serve", "--listen", "no-port", "--tokens", path, "--allow-force-release")
	if r.code != 64 || !strings.Contains(r.stderr, "--allow-force-release") {
		t.Errorf("--tokens with --allow-force-release: exit %d, stderr %q; want 64", r.code, r.stderr)
	}
}

// --max-ttl bounds the TTL of the gateway's sessions.
func TestServeMaxTTL(t *testing.T) {
	e := newEnv(t)
	s := e.serve("--max-ttl", "30s")
	for _, tc := range []struct {
		ttl    string
		status int
	}{{"30s", 201}, {"31s", 400}} {
		resp, err := http.Post(s.url+"/v1/sessions", "application/json", strings.NewReader(`{"ttl":"`+tc.ttl+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("a session of %s: %s %s, want %d", tc.ttl, resp.Status, body, tc.status)
		}
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(s.started)
	if r := e.run("serve", "--listen", "127.0.0.1:0", "--max-ttl", "48h"); r.code != 64 || !strings.Contains(r.stderr, "--max-ttl 48h0m0s: want") {
		t.Errorf("--max-ttl 48h: exit %d, stderr %q; want 64 and the range", r.code, r.stderr)
	}
}

// --max-locks bounds the locks of a session: one more is refused with
// the problem session-limit, which names the limit.
func TestServeMaxLocks(t *testing.T) {
	e := newEnv(t)
	s := e.serve("--max-locks", "1")
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(s.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	status, sess := post("/v1/sessions", `{"ttl":"30s"}`)
	if status != 201 {
		t.Fatalf("session: %d %v", status, sess)
	}
	id, _ := sess["id"].(string)
	if status, a := post("/v1/locks/a/acquire", `{"session":"`+id+`"}`); status != 200 {
		t.Fatalf("the first lock: %d %v", status, a)
	}
	status, a := post("/v1/locks/b/acquire", `{"session":"`+id+`"}`)
	if status != 429 || a["type"] != "urn:distlock:problem:session-limit" || a["limit"] != 1.0 {
		t.Errorf("the second lock: %d %v, want 429 session-limit with limit 1", status, a)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(s.started)
	if r := e.run("serve", "--listen", "127.0.0.1:0", "--max-locks", "0"); r.code != 64 || !strings.Contains(r.stderr, "--max-locks 0: want") {
		t.Errorf("--max-locks 0: exit %d, stderr %q; want 64 and the bound", r.code, r.stderr)
	}
}

func TestServeAnswersAndReleasesOnSIGTERM(t *testing.T) {
	e := newEnv(t)
	s := e.serve()
	if !strings.Contains(s.stderr.String(), "loopback only") {
		t.Errorf("serve without --tokens does not say it serves loopback only: %s", s.stderr)
	}
	if code, _ := get(t, s.url+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	b, err := gatewaylock.OpenURL(context.Background(), "distlock+"+s.url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Acquire(ctx, "serve/held")
	if err != nil {
		t.Fatal(err)
	}
	// The Client's instruments reach /metrics through the OTel SDK and its
	// Prometheus exporter: the one test of that path end to end.
	code, metrics := get(t, s.url+"/metrics")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^distlock_gateway_sessions\{[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^distlock_gateway_requests_total\{[^}]*route="/v1/sessions"[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^distlock_locks_held\{[^}]*distlock_backend="filelock"[^}]*\} 1$`),
		regexp.MustCompile(`(?m)^distlock_acquire_duration_seconds_count\{[^}]*distlock_backend="filelock"[^}]*outcome="acquired"[^}]*\} 1$`),
		// Counters are there at 0 before their first event.
		regexp.MustCompile(`(?m)^distlock_losses_total\{[^}]*distlock_backend="filelock"[^}]*reason="deadline"[^}]*\} 0$`),
		regexp.MustCompile(`(?m)^distlock_renewals_total\{[^}]*distlock_backend="filelock"[^}]*outcome="lost"[^}]*\} 0$`),
	} {
		if code != 200 || !want.MatchString(metrics) {
			t.Errorf("/metrics (%d) has no line matching %s", code, want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", metrics)
	}
	// The lock is held in the lock directory, by the gateway.
	fb, err := filelock.New(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fb.Acquire(ctx, "serve/held", driver.AcquireOptions{TTL: time.Second}); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("the gateway's lock is not held in the lock directory: %v", err)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if r := e.wait(s.started); r.code != 0 {
		t.Errorf("serve after SIGTERM: exit %d, stderr %s", r.code, r.stderr)
	}
	fl, err := fb.Acquire(ctx, "serve/held", driver.AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatalf("the lock outlived the gateway's SIGTERM: %v", err)
	}
	fl.Release(ctx)
	l.Release(ctx) // the gateway is gone: an error, ignored
	c.Close(ctx)
}

// python runs the end-to-end script of the Python client.
func python(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	dir, err := filepath.Abs("../../../../clients/python")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", append([]string{filepath.Join(dir, "e2e.py")}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	return cmd
}

func TestPythonClientWalk(t *testing.T) {
	e := newEnv(t)
	s := e.serve("--allow-force-release") // the walk forces a release, as an operator does
	cmd := python(t, "walk", s.url, e.tmp)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 e2e.py walk: %v\n%s", err, stderrOf(err))
	}
	var got struct {
		Token             uint64  `json:"token,string"`
		Token2            uint64  `json:"token2,string"`
		ValidAfterTTL     bool    `json:"valid_after_ttl"`
		TimeLeft          float64 `json:"time_left"`
		StaleWrite        bool    `json:"stale_write"`
		LostReason        string  `json:"lost_reason"`
		StaleRelease      string  `json:"stale_release"`
		CheckAfterRelease bool    `json:"check_after_release"`
		Stored            struct {
			Token uint64 `json:"token,string"`
			Data  string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var raw map[string]any
	json.Unmarshal(out, &raw)
	t.Logf("python: %s", out)
	switch {
	case got.Token == 0 || got.Token2 <= got.Token:
		t.Errorf("tokens %d then %d: not increasing", got.Token, got.Token2)
	case !got.ValidAfterTTL || got.TimeLeft <= 0:
		t.Errorf("the lock was not kept past its TTL by the keepalives (valid %v, %vs left)", got.ValidAfterTTL, got.TimeLeft)
	case raw["first_write"] != true || raw["second_write"] != true || got.StaleWrite:
		t.Errorf("fenced writes: %s", out)
	case got.LostReason != "forced_release":
		t.Errorf("loss reason %q, want forced_release", got.LostReason)
	case got.StaleRelease != "not-held":
		t.Errorf("release with the old token: %q, want not-held", got.StaleRelease)
	case raw["check_current"] != true || raw["check_stale"] != false || got.CheckAfterRelease:
		t.Errorf("sequencer checks: %s", out)
	case got.Stored.Token != got.Token2 || got.Stored.Data != "v2":
		t.Errorf("stored %+v, want the second holder's write", got.Stored)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(s.started)
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// TestGatewayKilledWhileHeld: a client sees the loss through its failing
// keepalive, before the lock's time runs out; after a restart the tokens
// go on increasing.
func TestGatewayKilledWhileHeld(t *testing.T) {
	e := newEnv(t)
	s := e.serve()
	cmd := python(t, "kill", s.url, e.tmp)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "ready ") {
		t.Fatalf("python: %q, stderr %s", lines.Text(), stderr.String())
	}
	token, _ := strconv.ParseUint(strings.TrimPrefix(lines.Text(), "ready "), 10, 64)
	s.cmd.Process.Kill()
	e.wait(s.started)
	killed := time.Now()
	if !lines.Scan() {
		t.Fatalf("python said nothing after the kill; stderr %s", stderr.String())
	}
	var got struct {
		Lost     string
		TimeLeft float64 `json:"time_left"`
	}
	if err := json.Unmarshal(lines.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, lines.Text())
	}
	t.Logf("python saw the loss %v after the kill: %s", time.Since(killed), lines.Text())
	if got.Lost != "unreachable" || got.TimeLeft <= 0 {
		t.Errorf("loss %q with %vs of the lock left; want unreachable, seen before the lock's time ran out", got.Lost, got.TimeLeft)
	}
	cmd.Wait()

	s2 := e.serve()
	b, err := gatewaylock.OpenURL(context.Background(), "distlock+"+s2.url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := b.Acquire(ctx, "e2e/kill", driver.AcquireOptions{TTL: 5 * time.Second, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= token {
		t.Errorf("token %d after the restart, not above %d", l.Token(), token)
	}
	l.Release(ctx)
	s2.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(s2.started)
}

func TestServeMutualTLS(t *testing.T) {
	e := newEnv(t)
	pki := testserver.TestPKI(t)
	s := e.serve("--tls-cert", pki.ServerCertFile, "--tls-key", pki.ServerKeyFile, "--tls-client-ca", pki.CAFile)
	if !strings.HasPrefix(s.url, "https://") {
		t.Fatalf("serve with TLS says %s", s.url)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := "?ca=" + pki.CAFile + "&cert=" + pki.ClientCertFile + "&key=" + pki.ClientKeyFile
	b, err := gatewaylock.OpenURL(ctx, "distlock+"+s.url+q)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.Acquire(ctx, "tls/a", driver.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatalf("Acquire over mutual TLS: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Without a client certificate the handshake fails.
	nb, err := gatewaylock.OpenURL(ctx, "distlock+"+s.url+"?ca="+pki.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	if _, err := nb.Acquire(ctx, "tls/a", driver.AcquireOptions{TTL: 5 * time.Second}); !errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Acquire without a client certificate: %v, want ErrUnavailable", err)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if r := e.wait(s.started); r.code != 0 {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
}

// distlock status lists the locks held through a gateway.
func TestStatusThroughGateway(t *testing.T) {
	e := newEnv(t)
	s := e.serve()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := gatewaylock.OpenURL(ctx, "distlock+"+s.url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.Acquire(ctx, "jobs/listed", driver.AcquireOptions{TTL: 10 * time.Second, Owner: "lister-test"})
	if err != nil {
		t.Fatal(err)
	}
	r := e.run("--backend", "distlock+"+s.url, "status", "--json", "jobs/")
	if r.code != 0 || !strings.Contains(r.stdout, `"jobs/listed"`) || !strings.Contains(r.stdout, "lister-test") ||
		!strings.Contains(r.stdout, strconv.FormatUint(l.Token(), 10)) {
		t.Errorf("status through the gateway: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
	l.Release(ctx)
	s.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(s.started)
}

// serve over postgres:// session locks with pgx's default pool says what
// the pool bounds (each lock held or awaited keeps a connection, and an
// acquire beyond them, of any key, waits); with pool_max_conns in the
// URL, or in lease mode, it says nothing of it.
func TestServeNotesPostgresSessionPool(t *testing.T) {
	e := newEnv(t)
	dsn := testserver.StartPostgres(t).DSN
	for _, tc := range []struct {
		url  string
		note bool
	}{{dsn, true}, {dsn + "&pool_max_conns=50", false}, {dsn + "&mode=lease", false}} {
		s := e.serve("--backend", tc.url)
		s.cmd.Process.Signal(syscall.SIGTERM)
		r := e.wait(s.started)
		if got := strings.Contains(r.stderr, "each lock held or awaited keeps a connection of the pool, which has"); got != tc.note {
			t.Errorf("serve --backend %s: the note on the pool said: %v, want %v; stderr:\n%s", tc.url, got, tc.note, r.stderr)
		}
	}
}
