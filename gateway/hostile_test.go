package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

func TestHostileInput(t *testing.T) {
	g := start(t, fileBackend(t))
	sid := g.session("", "a", "10s")
	acq := "/v1/locks/k/acquire"
	body := map[string]any{"session": sid}
	cases := []struct {
		name, method, path string
		body               any
		status             int
		typ                string
	}{
		{"oversized body", "POST", acq, `{"session":"` + strings.Repeat("x", gateway.MaxBody) + `"}`, 413, gateway.ProblemTooLarge},
		{"malformed JSON", "POST", acq, `{"session":`, 400, gateway.ProblemBadRequest},
		{"not an object", "POST", acq, `[1,2]`, 400, gateway.ProblemBadRequest},
		{"two objects", "POST", acq, `{"session":"x"}{}`, 400, gateway.ProblemBadRequest},
		{"unknown field", "POST", acq, `{"session":"x","sesion":"y"}`, 400, gateway.ProblemBadRequest},
		{"empty body", "POST", acq, "", 400, gateway.ProblemBadRequest},
		{"NUL in name", "POST", "/v1/locks/a%00b/acquire", body, 400, gateway.ProblemBadName},
		{"newline in name", "POST", "/v1/locks/a%0Ab/acquire", body, 400, gateway.ProblemBadName},
		{"bad UTF-8 in name", "POST", "/v1/locks/a%FFb/acquire", body, 400, gateway.ProblemBadName},
		{"name over 512 bytes", "POST", "/v1/locks/" + strings.Repeat("n", 513) + "/acquire", body, 400, gateway.ProblemBadName},
		{"raw .. segment", "POST", "/v1/locks/../sessions", body, 400, gateway.ProblemBadName},
		{"raw / in name", "POST", "/v1/locks/a/b/acquire", body, 400, gateway.ProblemBadName},
		{"raw . segment", "POST", "/v1/locks/./acquire", body, 400, gateway.ProblemBadName},
		{"bad wait", "POST", acq + "?wait=forever", body, 400, gateway.ProblemBadRequest},
		{"negative wait", "POST", acq + "?wait=-1s", body, 400, gateway.ProblemBadRequest},
		{"unknown session", "POST", acq, map[string]any{"session": "nope"}, 404, gateway.ProblemSessionNotFound},
		{"bad token", "POST", "/v1/locks/k/release", map[string]any{"session": sid, "token": "12abc"}, 400, gateway.ProblemBadRequest},
		{"token over 64 bits", "POST", "/v1/locks/k/check", map[string]any{"token": "18446744073709551616"}, 400, gateway.ProblemBadRequest},
		{"token as a number", "POST", "/v1/locks/k/check", `{"token":5}`, 400, gateway.ProblemBadRequest},
		{"TTL too short", "POST", "/v1/sessions", map[string]any{"ttl": "1ms"}, 400, gateway.ProblemBadTTL},
		{"TTL too long", "POST", "/v1/sessions", map[string]any{"ttl": "1000h"}, 400, gateway.ProblemBadTTL},
		{"TTL not a duration", "POST", "/v1/sessions", map[string]any{"ttl": "soon"}, 400, gateway.ProblemBadRequest},
		{"owner with control characters", "POST", "/v1/sessions", map[string]any{"owner": "a\x1b[2J"}, 400, gateway.ProblemBadRequest},
		{"owner too long", "POST", "/v1/sessions", map[string]any{"owner": strings.Repeat("o", 300)}, 400, gateway.ProblemBadRequest},
		{"unknown route", "GET", "/v1/nothing", nil, 404, gateway.ProblemNotFound},
		{"wrong method", "GET", acq, nil, 405, gateway.ProblemMethodNotAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g.do(tc.method, tc.path, "", tc.body).want(t, tc.status, tc.typ)
		})
	}
	t.Run("wrong content type", func(t *testing.T) {
		resp, err := g.hc.Post(g.url+acq, "text/plain", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 415 {
			t.Errorf("status %d, want 415", resp.StatusCode)
		}
	})
	t.Run("1 MB name", func(t *testing.T) {
		a := g.do("POST", "/v1/locks/"+strings.Repeat("n", 1<<20)+"/acquire", "", body)
		if a.status != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("status %d, want 431", a.status)
		}
	})
	// Nothing of the above took a lock or left a session behind.
	if s := g.g.Stats(); s.Locks != 0 || s.Sessions != 1 {
		t.Errorf("after hostile input: %+v, want no lock and the one session", s)
	}
	g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
	g.idle()
}

// A value out of range is answered as such, with what was sent and the
// bound, never as malformed JSON: a duration too large for Go's
// time.Duration, a number of seconds too large for it, a token or an index
// over 64 bits. A wait out of range is cut to the longest wait, as any
// wait over it is.
func TestOutOfRangeValuesAreNamed(t *testing.T) {
	g := start(t, fileBackend(t), gateway.WithMaxWait(50*time.Millisecond))
	sid := g.session("", "a", "10s")
	cases := []struct {
		name, method, path string
		body               any
		status             int
		typ                string
		detail             []string
	}{
		{"TTL over the maximum", "POST", "/v1/sessions", map[string]any{"ttl": "2h"}, 400, gateway.ProblemBadTTL,
			[]string{`"2h"`, "above the maximum, 10m0s"}},
		{"TTL over time.Duration", "POST", "/v1/sessions", map[string]any{"ttl": "999999999999h"}, 400, gateway.ProblemBadTTL,
			[]string{`"999999999999h"`, "above the maximum, 10m0s"}},
		{"TTL under time.Duration", "POST", "/v1/sessions", map[string]any{"ttl": "-999999999999h"}, 400, gateway.ProblemBadTTL,
			[]string{`"-999999999999h"`, "below the minimum, 100ms"}},
		{"TTL of many seconds", "POST", "/v1/sessions", `{"ttl":1e300}`, 400, gateway.ProblemBadTTL,
			[]string{"1e300", "above the maximum, 10m0s"}},
		{"TTL of more seconds than a float holds", "POST", "/v1/sessions", `{"ttl":1e400}`, 400, gateway.ProblemBadTTL,
			[]string{"1e400", "above the maximum, 10m0s"}},
		{"TTL of many negative seconds", "POST", "/v1/sessions", `{"ttl":-1e300}`, 400, gateway.ProblemBadTTL,
			[]string{"-1e300", "below the minimum, 100ms"}},
		{"TTL not a duration", "POST", "/v1/sessions", map[string]any{"ttl": "soon"}, 400, gateway.ProblemBadRequest,
			[]string{"ttl", `"15s"`}},
		{"TTL of the wrong type", "POST", "/v1/sessions", `{"ttl":true}`, 400, gateway.ProblemBadRequest,
			[]string{"ttl", `"15s"`}},
		{"token over 64 bits", "POST", "/v1/locks/k/check", map[string]any{"token": "18446744073709551616"}, 400, gateway.ProblemBadRequest,
			[]string{"18446744073709551616", "out of range", "18446744073709551615"}},
		{"index over 64 bits", "GET", "/v1/locks/k?wait=1s&index=18446744073709551616", nil, 400, gateway.ProblemBadRequest,
			[]string{"18446744073709551616", "out of range", "18446744073709551615"}},
		{"wait over time.Duration", "POST", "/v1/sessions/" + sid + "/keepalive?wait=999999999999h", nil, 200, "", nil},
		{"wait of more seconds than a float holds", "POST", "/v1/sessions/" + sid + "/keepalive?wait=1e400", nil, 200, "", nil},
		{"negative wait under time.Duration", "POST", "/v1/sessions/" + sid + "/keepalive?wait=-999999999999h", nil, 400, gateway.ProblemBadRequest,
			[]string{"wait", "negative"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := g.do(tc.method, tc.path, "", tc.body).want(t, tc.status, tc.typ)
			for _, d := range tc.detail {
				if !strings.Contains(a.str("detail"), d) {
					t.Errorf("detail %q does not say %s", a.str("detail"), d)
				}
			}
		})
	}
	if s := g.g.Stats(); s.Sessions != 1 {
		t.Errorf("%d sessions, want the one", s.Sessions)
	}
	g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
	g.idle()
}

func TestOddNamesAreDistinctLocks(t *testing.T) {
	g := start(t, fileBackend(t))
	sid := g.session("", "a", "10s")
	names := []string{"a/b", "a%2Fb", "..", ".", "a/../b", "/", "ключ", "a b"}
	seen := map[string]bool{}
	for _, n := range names {
		tok := g.acquire("", sid, n, "0").want(t, 200, "").str("token")
		if seen[n] {
			t.Errorf("%q granted twice", n)
		}
		seen[n] = true
		_ = tok
	}
	if s := g.g.Stats(); s.Locks != len(names) {
		t.Errorf("%d locks held, want %d", s.Locks, len(names))
	}
	g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
	g.idle()
}

func TestManyIdleSessions(t *testing.T) {
	const n = gateway.DefaultMaxSessions
	g := start(t, fileBackend(t))
	goroutines := runtime.NumGoroutine()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ids := make([]string, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				ids[i] = g.session("", "idle", "10m")
			}
		})
	}
	wg.Wait()
	g.do("POST", "/v1/sessions", "", map[string]any{"ttl": "10m"}).want(t, 429, gateway.ProblemTooMany)
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("%d idle sessions: %d bytes of heap each", n, per)
	if per > 16<<10 {
		t.Errorf("an idle session costs %d bytes of heap, more than 16 KiB", per)
	}
	if d := runtime.NumGoroutine() - goroutines; d > 50 {
		t.Errorf("%d more goroutines with %d idle sessions", d, n)
	}
	for _, id := range ids {
		g.do("DELETE", "/v1/sessions/"+id, "", nil).want(t, 204, "")
	}
	g.idle()
}

// Waits are bounded in number (WithMaxWaiting) and in time (WithMaxWait):
// a keepalive that asks to wait an hour waits the bound. The bound leaves
// the test seconds to see the two waits at once and be refused a third
// (at 200ms, a test that ran late saw fewer, or was let in).
func TestWaitsAreBounded(t *testing.T) {
	const bound = 3 * time.Second
	g := start(t, fileBackend(t), gateway.WithMaxWaiting(2), gateway.WithMaxWait(bound))
	a, b, c := g.session("", "a", "10s"), g.session("", "b", "10s"), g.session("", "c", "10s")
	var wg sync.WaitGroup
	for _, s := range []string{a, b} {
		wg.Go(func() { g.do("POST", "/v1/sessions/"+s+"/keepalive?wait=1h", "", nil).want(t, 200, "") })
	}
	waitFor(t, 10*time.Second, "the keepalives do not wait", func() bool { return g.g.Stats().Waiting == 2 })
	g.do("POST", "/v1/sessions/"+c+"/keepalive?wait=1s", "", nil).want(t, 429, gateway.ProblemTooMany)
	g.acquire("", c, "w", "1s").want(t, 429, gateway.ProblemTooMany)
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited: // the waits of 1h were cut to WithMaxWait
	case <-time.After(time.Minute):
		t.Fatalf("a wait of 1h lasted a minute with WithMaxWait(%v)", bound)
	}
	for _, s := range []string{a, b, c} {
		g.do("DELETE", "/v1/sessions/"+s, "", nil).want(t, 204, "")
	}
	g.idle()
}

func TestLocksPerSessionAreBounded(t *testing.T) {
	g := start(t, fileBackend(t), gateway.WithMaxLocks(2))
	a := g.session("", "a", "10s")
	g.acquire("", a, "1", "0").want(t, 200, "")
	g.acquire("", a, "2", "0").want(t, 200, "")
	g.acquire("", a, "3", "0").want(t, 429, gateway.ProblemSessionLimit)
	g.acquire("", a, "1", "0").want(t, 200, "") // the same grant again
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.idle()
}

// The 65th lock of a session (DefaultMaxLocks), its 65th term or permit
// too, is refused with a problem of its own, which names the limit and
// has no Retry-After; a 429 over another limit (the waiting requests)
// stays ProblemTooMany with one, and the session's next lock passes once
// it released one.
func TestSessionLimitIsItsOwnProblem(t *testing.T) {
	mb := memlock.New()
	t.Cleanup(func() { mb.Close() })
	g := start(t, mb, gateway.WithMaxWaiting(1))
	a := g.session("", "a", "1m")
	var tokens []string
	for i := range gateway.DefaultMaxLocks {
		tokens = append(tokens, g.acquire("", a, fmt.Sprint("held/", i), "0").want(t, 200, "").str("token"))
	}
	for name, over := range map[string]answer{
		"lock":     g.acquire("", a, "one-more", "0"),
		"waiting":  g.acquire("", a, "one-more", "1m"),
		"campaign": g.campaign("", a, "one-more", "v", "0"),
		"permit":   g.permit(a, "one-more", 2, false, "0"),
	} {
		over.want(t, 429, gateway.ProblemSessionLimit)
		if got := over.num("limit"); got != gateway.DefaultMaxLocks {
			t.Errorf("%s: limit %v, want %d: %s", name, got, gateway.DefaultMaxLocks, over.raw)
		}
		if ra := over.header.Get("Retry-After"); ra != "" {
			t.Errorf("%s: Retry-After %q on a session's limit", name, ra)
		}
		if d := over.str("detail"); !strings.Contains(d, "--max-locks") {
			t.Errorf("%s: the detail does not say how to raise the limit: %q", name, d)
		}
	}

	// Another session waits for a held lock, which fills WithMaxWaiting:
	// a second wait is refused with the 429 that passes later.
	b, c := g.session("", "b", "1m"), g.session("", "c", "1m")
	waited := make(chan answer, 1)
	go func() {
		waited <- g.doAsync("POST", "/v1/locks/held%2F0/acquire?wait=50s", map[string]any{"session": b})
	}()
	waitFor(t, 30*time.Second, "the acquire does not wait", func() bool { return g.g.Stats().Waiting == 1 })
	busy := g.acquire("", c, "held/1", "1m").want(t, 429, gateway.ProblemTooMany)
	if busy.header.Get("Retry-After") == "" || busy.body["limit"] != nil {
		t.Errorf("a 429 over the waiting requests: Retry-After %q, limit %v", busy.header.Get("Retry-After"), busy.body["limit"])
	}

	// The session's release makes room for its next lock, and hands
	// held/0 to the waiter.
	g.do("POST", "/v1/locks/held%2F0/release", "", map[string]any{"session": a, "token": tokens[0]}).want(t, 200, "")
	if w := <-waited; w.status != 200 {
		t.Errorf("the waiter: %d %s", w.status, w.raw)
	}
	g.acquire("", a, "one-more", "0").want(t, 200, "")
	g.acquire("", a, "two-more", "0").want(t, 429, gateway.ProblemSessionLimit)
	for _, s := range []string{a, b, c} {
		g.do("DELETE", "/v1/sessions/"+s, "", nil).want(t, 204, "")
	}
	g.idle()
}

// TestSlowClientsAreCutOff: a client that sends its headers, or its body,
// too slowly is disconnected.
func TestSlowClientsAreCutOff(t *testing.T) {
	g := start(t, fileBackend(t), gateway.WithHeaderTimeout(200*time.Millisecond))
	host := strings.TrimPrefix(g.url, "http://")
	for name, send := range map[string]string{
		"headers": "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n",
		"body":    "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"ow",
		// Answered at once, before the handler would read the body.
		"body, foreign host":  "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"ow",
		"body, unknown route": "POST /v1/nothing HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"ow",
		"body, keepalive":     "POST /v1/sessions/x.y/keepalive HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"ow",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", host)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, send); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			begun := time.Now()
			reply, err := io.ReadAll(bufio.NewReader(c))
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the connection was still open after %v", time.Since(begun))
			}
			if bytes.Contains(reply, []byte(" 201 ")) {
				t.Errorf("a session was created: %s", reply)
			}
		})
	}
	g.idle()
}

func TestLogsHoldNoSecrets(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	const secret = "app-secret-0123456789"
	tokens, err := gateway.ParseTokens([]byte(`{"tokens":[{"name":"app","token":"` + secret + `","prefixes":[""]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, fileBackend(t), gateway.WithTokens(tokens), gateway.WithLogger(logger))
	sid := g.session(secret, "a", "10s")
	g.acquire(secret, sid, "k", "0").want(t, 200, "")
	g.do("POST", "/v1/sessions/"+sid+"/keepalive", secret, nil).want(t, 200, "")
	g.do("POST", "/v1/sessions/"+sid+"/keepalive", "wrong-"+secret, nil).want(t, 401, gateway.ProblemUnauthorized)
	g.do("DELETE", "/v1/sessions/"+sid, secret, nil).want(t, 204, "")
	g.idle()
	mu.Lock()
	defer mu.Unlock()
	out := buf.String()
	if !strings.Contains(out, "token=app") {
		t.Errorf("the log does not name the token: %s", out)
	}
	_, rand, _ := strings.Cut(sid, ".")
	for _, s := range []string{secret, rand} {
		if strings.Contains(out, s) {
			t.Errorf("the log holds a secret %q:\n%s", s, out)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Without tokens, a request naming another host (a web page whose name was
// rebound to the loopback address) is refused.
func TestForeignHostRefusedWithoutTokens(t *testing.T) {
	g := start(t, fileBackend(t))
	for host, want := range map[string]int{"evil.example:7420": 403, "localhost:7420": 201, "[::1]": 201, "127.0.0.2": 201} {
		req, _ := http.NewRequest("POST", g.url+"/v1/sessions", strings.NewReader(`{"ttl":"1s"}`))
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		resp, err := g.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: %d, want %d", host, resp.StatusCode, want)
		}
	}
	waitFor(t, 10*time.Second, "the sessions did not expire", func() bool { return g.g.Stats().Sessions == 0 })
}

// A flood of keepalives on one session: each newer one sends the older
// ones back at once, so that they do not pile up.
func TestKeepaliveFlood(t *testing.T) {
	g := start(t, fileBackend(t))
	a := g.session("", "a", "10s")
	const n = 50
	var wg sync.WaitGroup
	superseded := make(chan bool, n)
	begun := time.Now()
	for range n {
		wg.Go(func() {
			ka := g.do("POST", "/v1/sessions/"+a+"/keepalive?wait=20s", "", nil)
			superseded <- ka.status == 200 && ka.body["superseded"] == true
		})
	}
	waitFor(t, 20*time.Second, "the keepalives were not sent back", func() bool { return len(superseded) >= n-1 })
	for range n - 1 {
		if !<-superseded {
			t.Errorf("an older keepalive was not answered superseded")
		}
	}
	if d := time.Since(begun); d > 15*time.Second {
		t.Errorf("older keepalives waited %v", d)
	}
	if s := g.g.Stats(); s.Waiting > 1 {
		t.Errorf("%d keepalives still wait", s.Waiting)
	}
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "") // ends the last one
	wg.Wait()
	g.idle()
}

// A client that goes away while its acquire waits leaves no wait and gets
// no lock.
func TestAbandonedAcquireLeavesNothing(t *testing.T) {
	g := start(t, fileBackend(t))
	a, b := g.session("", "a", "10s"), g.session("", "b", "10s")
	tok := g.acquire("", a, "gone", "0").want(t, 200, "").str("token")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", g.url+"/v1/locks/gone/acquire?wait=30s", strings.NewReader(`{"session":"`+b+`"}`))
	req.Header.Set("Content-Type", "application/json")
	done := make(chan error, 1)
	go func() {
		resp, err := g.hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, 10*time.Second, "the acquire does not wait", func() bool { return g.g.Stats().Waiting == 1 })
	cancel()
	<-done
	waitFor(t, 10*time.Second, "the abandoned acquire still waits", func() bool { return g.g.Stats().Waiting == 0 })
	g.do("POST", "/v1/locks/gone/release", "", map[string]any{"session": a, "token": tok}).want(t, 200, "")
	if s := g.g.Stats(); s.Locks != 0 {
		t.Errorf("after the release: %+v; the abandoned acquire took the lock", s)
	}
	// The key is free for another.
	g.acquire("", a, "gone", "0").want(t, 200, "")
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
	g.idle()
}

// A session's acquires that come together are counted once each: a grant
// was counted both as held and as pending between its grant and the end
// of its request, so a session that never held or waited for more than
// its limit was refused ProblemSessionLimit, which clients do not retry.
func TestSessionLimitCountsEachLockOnce(t *testing.T) {
	const most = 8
	mb := memlock.New()
	t.Cleanup(func() { mb.Close() })
	g := start(t, mb, gateway.WithMaxLocks(most))
	for round := range 150 {
		sid := g.session("", "a", "1m")
		answers := make(chan answer, most)
		for i := range most {
			go func() {
				answers <- g.doAsync("POST", fmt.Sprintf("/v1/locks/r%d-%d/acquire?wait=0", round, i), map[string]any{"session": sid})
			}()
		}
		for range most {
			if a := <-answers; a.status != 200 {
				t.Fatalf("round %d: %d locks of a session's %d at once: %d %s", round, most, most, a.status, a.raw)
			}
		}
		g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
	}
	g.idle()
}
