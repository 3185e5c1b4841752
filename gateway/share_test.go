package gateway_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/gateway"
)

const (
	readerSecret = "reader-secret-0123456789"
	opsSecret    = "ops-secret-0123456789"
)

// shareTokens are a read-only token of reports/ and an admin token, with
// the extra entry fields given (JSON, each starting with a comma).
func shareTokens(t *testing.T, reader, ops string) *gateway.Tokens {
	t.Helper()
	toks, err := gateway.ParseTokens([]byte(`{"tokens":[
		{"name":"reader","token":"` + readerSecret + `","prefixes":["reports/"]` + reader + `},
		{"name":"ops","token":"` + opsSecret + `","prefixes":[""],"admin":true` + ops + `}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// A token that opens all the sessions it may, and holds all the waits it
// may (keepalives and acquires that wait, blocking reads), leaves the
// other token its share of each: the limits are split among the tokens.
func TestTokensHaveTheirOwnShare(t *testing.T) {
	g := start(t, fileBackend(t), gateway.WithTokens(shareTokens(t, "", "")),
		gateway.WithMaxSessions(4), gateway.WithMaxWaiting(4), gateway.WithMaxStreams(2))

	// Sessions: 2 each.
	r1, r2 := g.session(readerSecret, "r1", "5m"), g.session(readerSecret, "r2", "5m")
	a := g.do("POST", "/v1/sessions", readerSecret, map[string]any{"ttl": "5m"}).want(t, 429, gateway.ProblemTooMany)
	if d := a.str("detail"); !strings.Contains(d, `token "reader" has 2 sessions open`) {
		t.Errorf("detail %q does not name the token and its count", d)
	}
	o1, o2 := g.session(opsSecret, "o1", "5m"), g.session(opsSecret, "o2", "5m")
	g.do("POST", "/v1/sessions", opsSecret, map[string]any{"ttl": "5m"}).want(t, 429, gateway.ProblemTooMany)

	// Waiting requests: 2 each. The reader's waits fill its share.
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for _, s := range []string{r1, r2} {
		wg.Go(func() { g.do("POST", "/v1/sessions/"+s+"/keepalive?wait=1m", readerSecret, nil) })
	}
	waitFor(t, 10*time.Second, "the reader's keepalives do not wait", func() bool { return g.g.Stats().Waiting == 2 })
	g.do("GET", "/v1/locks/reports%2Fx?index=0&wait=1m", readerSecret, nil).want(t, 429, gateway.ProblemTooMany)
	g.acquire(readerSecret, r1, "reports/x", "1m").want(t, 429, gateway.ProblemTooMany)
	// The admin's are still served: one acquire that waits, one keepalive.
	g.acquire(opsSecret, o1, "held", "0").want(t, 200, "")
	wg.Go(func() { g.acquire(opsSecret, o2, "held", "1m") })
	wg.Go(func() { g.do("POST", "/v1/sessions/"+o1+"/keepalive?wait=1m", opsSecret, nil) })
	waitFor(t, 10*time.Second, "the admin's requests do not wait", func() bool { return g.g.Stats().Waiting == 4 })
	g.do("GET", "/v1/locks/held?index=0&wait=1m", opsSecret, nil).want(t, 429, gateway.ProblemTooMany)

	// Event streams: 1 each.
	rs := g.stream(readerSecret, "", "")
	g.do("GET", "/v1/events", readerSecret, nil).want(t, 429, gateway.ProblemTooMany)
	g.stream(opsSecret, "", "").cancel()
	rs.cancel()

	// Ending the sessions ends their waits (and the admin's grant).
	for _, s := range []struct{ id, secret string }{{r1, readerSecret}, {r2, readerSecret}, {o1, opsSecret}, {o2, opsSecret}} {
		g.do("DELETE", "/v1/sessions/"+s.id, s.secret, nil).want(t, 204, "")
	}
	wg.Wait()
	g.idle()
	// And their places are free again.
	g.do("DELETE", "/v1/sessions/"+g.session(readerSecret, "r3", "5m"), readerSecret, nil).want(t, 204, "")
}

// A token's entry may set its share; the tokens without one split what is
// left. Shares that add up to more than a limit are refused by New.
func TestTokenSharesFromTheFile(t *testing.T) {
	g := start(t, fileBackend(t), gateway.WithTokens(shareTokens(t, `,"max_sessions":3`, "")), gateway.WithMaxSessions(4))
	var ids []string
	for range 3 {
		ids = append(ids, g.session(readerSecret, "r", "5m"))
	}
	g.do("POST", "/v1/sessions", readerSecret, map[string]any{"ttl": "5m"}).want(t, 429, gateway.ProblemTooMany)
	o := g.session(opsSecret, "o", "5m")
	g.do("POST", "/v1/sessions", opsSecret, map[string]any{"ttl": "5m"}).want(t, 429, gateway.ProblemTooMany)
	for _, id := range ids {
		g.do("DELETE", "/v1/sessions/"+id, readerSecret, nil).want(t, 204, "")
	}
	g.do("DELETE", "/v1/sessions/"+o, opsSecret, nil).want(t, 204, "")
	g.idle()

	for _, tc := range []struct{ reader, ops string }{
		{`,"max_sessions":4`, ""},                    // nothing left for ops
		{`,"max_waiting":600`, `,"max_waiting":600`}, // over the 1024 waits
		{`,"max_streams":300`, ""},                   // over the 256 streams
	} {
		if _, err := gateway.New(fileBackend(t), gateway.WithTokens(shareTokens(t, tc.reader, tc.ops)), gateway.WithMaxSessions(4)); !errors.Is(err, gateway.ErrInvalidOption) {
			t.Errorf("shares %s %s: New returned %v, want ErrInvalidOption", tc.reader, tc.ops, err)
		}
	}
	// More tokens than a limit has room for: each may have 1, while the
	// limit lasts.
	many, err := gateway.ParseTokens([]byte(`{"tokens":[{"name":"a","token":"a-secret-0123456789","prefixes":[""]},
		{"name":"b","token":"b-secret-0123456789","prefixes":[""]},{"name":"c","token":"c-secret-0123456789","prefixes":[""]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	g = start(t, fileBackend(t), gateway.WithTokens(many), gateway.WithMaxSessions(2))
	a, b := g.session("a-secret-0123456789", "a", "5m"), g.session("b-secret-0123456789", "b", "5m")
	g.do("POST", "/v1/sessions", "a-secret-0123456789", map[string]any{"ttl": "5m"}).want(t, 429, gateway.ProblemTooMany)
	g.do("POST", "/v1/sessions", "c-secret-0123456789", map[string]any{"ttl": "5m"}).want(t, 429, gateway.ProblemTooMany)
	g.do("DELETE", "/v1/sessions/"+a, "a-secret-0123456789", nil).want(t, 204, "")
	g.do("DELETE", "/v1/sessions/"+g.session("c-secret-0123456789", "c", "5m"), "c-secret-0123456789", nil).want(t, 204, "")
	g.do("DELETE", "/v1/sessions/"+b, "b-secret-0123456789", nil).want(t, 204, "")
	g.idle()

	if _, err := gateway.ParseTokens([]byte(`{"tokens":[{"name":"a","token":"` + readerSecret + `","prefixes":[""],"max_sessions":-1}]}`)); !errors.Is(err, gateway.ErrTokens) {
		t.Errorf("a negative share: ParseTokens returned %v, want ErrTokens", err)
	}
}

// A session's TTL is bounded (WithTTLRange, by default DefaultMaxTTL), so
// that a client that vanishes frees its locks and its place in time.
func TestSessionTTLIsBounded(t *testing.T) {
	g := start(t, fileBackend(t))
	over := (gateway.DefaultMaxTTL + time.Second).String()
	a := g.do("POST", "/v1/sessions", "", map[string]any{"ttl": over}).want(t, 400, gateway.ProblemBadTTL)
	if d := a.str("detail"); !strings.Contains(d, "above the maximum, "+gateway.DefaultMaxTTL.String()) {
		t.Errorf("detail %q does not give the maximum", d)
	}
	g.do("DELETE", "/v1/sessions/"+g.session("", "a", gateway.DefaultMaxTTL.String()), "", nil).want(t, 204, "")
	// An hour, as a token that meant to hold its sessions without
	// keepalives could ask, is over the default.
	g.do("POST", "/v1/sessions", "", map[string]any{"ttl": "1h"}).want(t, 400, gateway.ProblemBadTTL)
	g2 := start(t, fileBackend(t), gateway.WithTTLRange(gateway.DefaultMinTTL, 30*time.Second))
	g2.do("POST", "/v1/sessions", "", map[string]any{"ttl": "31s"}).want(t, 400, gateway.ProblemBadTTL)
	g.idle()
}
