package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

func token(t *testing.T, a answer) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(a.str("token"), 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("token %q is not a positive decimal string: %s", a.str("token"), a.raw)
	}
	return n
}

func TestSessionLifecycle(t *testing.T) {
	g := start(t, fileBackend(t))
	sid := g.session("", "alice", "5s")
	if !strings.Contains(sid, ".") {
		t.Errorf("session id %q has no epoch", sid)
	}
	a := g.do("POST", "/v1/sessions/"+sid+"/keepalive", "", nil).want(t, 200, "")
	if left := a.num("ttl_remaining_ms"); left <= 0 || left > 5000 {
		t.Errorf("ttl_remaining_ms %v, want in (0, 5000]", left)
	}
	l := g.acquire("", sid, "jobs/a", "0").want(t, 200, "")
	token(t, l)
	g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
	g.do("POST", "/v1/sessions/"+sid+"/keepalive", "", nil).want(t, 404, gateway.ProblemSessionNotFound)
	// Deleting the session released its lock.
	other := g.session("", "bob", "5s")
	g.acquire("", other, "jobs/a", "0").want(t, 200, "")
	g.do("DELETE", "/v1/sessions/"+other, "", nil).want(t, 204, "")
	g.idle()
}

func TestAcquireIsIdempotentAndReleaseIsFenced(t *testing.T) {
	g := start(t, fileBackend(t))
	a, b := g.session("", "a", "10s"), g.session("", "b", "10s")
	first := token(t, g.acquire("", a, "k", "0").want(t, 200, ""))
	if again := token(t, g.acquire("", a, "k", "5s").want(t, 200, "")); again != first {
		t.Errorf("retried acquire: token %d, want the same grant %d", again, first)
	}
	busy := g.acquire("", b, "k", "0").want(t, 409, gateway.ProblemNotAcquired)
	if h, _ := busy.body["holder"].(map[string]any); h["token"] != strconv.FormatUint(first, 10) || h["owner"] != "a" {
		t.Errorf("holder %v, want token %d owner a", busy.body["holder"], first)
	}
	// A stale token frees nothing.
	g.do("POST", "/v1/locks/k/release", "", map[string]any{"session": a, "token": strconv.FormatUint(first+1, 10)}).
		want(t, 409, gateway.ProblemNotHeld)
	g.do("POST", "/v1/locks/k/release", "", map[string]any{"session": b, "token": strconv.FormatUint(first, 10)}).
		want(t, 409, gateway.ProblemNotHeld)
	g.acquire("", b, "k", "0").want(t, 409, gateway.ProblemNotAcquired)
	g.do("POST", "/v1/locks/k/check", "", map[string]any{"token": strconv.FormatUint(first, 10)}).want(t, 200, "")
	g.do("POST", "/v1/locks/k/release", "", map[string]any{"session": a, "token": strconv.FormatUint(first, 10)}).want(t, 200, "")
	g.do("POST", "/v1/locks/k/release", "", map[string]any{"session": a, "token": strconv.FormatUint(first, 10)}).
		want(t, 409, gateway.ProblemNotHeld)
	second := token(t, g.acquire("", b, "k", "0").want(t, 200, ""))
	if second <= first {
		t.Errorf("token %d after %d", second, first)
	}
	// The sequencer check: the old token is no longer current.
	if c := g.do("POST", "/v1/locks/k/check", "", map[string]any{"token": strconv.FormatUint(first, 10)}).want(t, 200, ""); c.body["current"] != false {
		t.Errorf("check of the old token: %s", c.raw)
	}
	if c := g.do("POST", "/v1/locks/k/check", "", map[string]any{"token": strconv.FormatUint(second, 10)}).want(t, 200, ""); c.body["current"] != true {
		t.Errorf("check of the current token: %s", c.raw)
	}
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
	g.idle()
}

func TestAcquireWaitsForRelease(t *testing.T) {
	g := start(t, fileBackend(t))
	a, b := g.session("", "a", "10s"), g.session("", "b", "10s")
	tok := token(t, g.acquire("", a, "w", "0").want(t, 200, ""))
	got := make(chan answer, 1)
	go func() { got <- g.acquire("", b, "w", "30s") }()
	waitFor(t, 10*time.Second, "the acquire does not wait", func() bool { return g.g.Stats().Waiting == 1 })
	select {
	case a := <-got:
		t.Fatalf("granted while held: %s", a.raw)
	default:
	}
	g.do("POST", "/v1/locks/w/release", "", map[string]any{"session": a, "token": strconv.FormatUint(tok, 10)}).want(t, 200, "")
	if next := token(t, (<-got).want(t, 200, "")); next <= tok {
		t.Errorf("token %d after %d", next, tok)
	}
	// A wait that ends answers 409.
	g.acquire("", a, "w", "50ms").want(t, 409, gateway.ProblemNotAcquired)
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
	g.idle()
}

func TestDeletedSessionEndsItsWait(t *testing.T) {
	g := start(t, fileBackend(t))
	a, b := g.session("", "a", "10s"), g.session("", "b", "10s")
	g.acquire("", a, "d", "0").want(t, 200, "")
	got := make(chan answer, 1)
	go func() { got <- g.acquire("", b, "d", "30s") }()
	waitFor(t, 10*time.Second, "the acquire does not wait", func() bool { return g.g.Stats().Waiting == 1 })
	g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
	(<-got).want(t, 404, gateway.ProblemSessionNotFound)
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.idle()
}

func TestSessionExpiresWithoutKeepalive(t *testing.T) {
	g := start(t, fileBackend(t))
	a, b := g.session("", "a", "300ms"), g.session("", "b", "10s")
	g.acquire("", a, "e", "0").want(t, 200, "")
	start := time.Now()
	g.acquire("", b, "e", "10s").want(t, 200, "")
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("granted %v after the holder's last request, before its session's TTL", d)
	}
	g.do("POST", "/v1/sessions/"+a+"/keepalive", "", nil).want(t, 404, gateway.ProblemSessionNotFound)
	g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
	g.idle()
}

// Long-polls longer than the TTL keep a session alive. The TTL restarts
// at the end of each request, so the test's gaps between requests must
// stay below it: seconds, not the 300ms of a TTL that a loaded machine
// outlasted.
func TestKeepaliveKeepsSession(t *testing.T) {
	g := start(t, fileBackend(t))
	a := g.session("", "a", "2s")
	g.acquire("", a, "k", "0").want(t, 200, "")
	for range 3 {
		ka := g.do("POST", "/v1/sessions/"+a+"/keepalive?wait=2500ms", "", nil).want(t, 200, "")
		locks, _ := ka.body["locks"].([]any)
		if len(locks) != 1 {
			t.Fatalf("keepalive: %s", ka.raw)
		}
	}
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.idle()
}

// events waits on keepalives until one reports an event of type typ.
func (g *gw) events(tok, sid, typ string) map[string]any {
	g.t.Helper()
	end := time.Now().Add(30 * time.Second)
	for time.Now().Before(end) {
		ka := g.do("POST", "/v1/sessions/"+sid+"/keepalive?wait=10s", tok, nil).want(g.t, 200, "")
		evs, _ := ka.body["events"].([]any)
		for _, e := range evs {
			if m := e.(map[string]any); m["type"] == typ {
				return m
			}
		}
	}
	g.t.Fatalf("no %s event", typ)
	return nil
}

func TestKeepaliveReportsLoss(t *testing.T) {
	mb := memlock.New()
	g := start(t, mb)
	a := g.session("", "a", "10s")
	tok := g.acquire("", a, "lost", "0").want(t, 200, "").str("token")
	got := make(chan map[string]any, 1)
	go func() { got <- g.events("", a, "lock_lost") }()
	waitFor(t, 10*time.Second, "the keepalive does not wait", func() bool { return g.g.Stats().Waiting == 1 })
	begun := time.Now()
	mb.Revoke("lost")
	e := <-got
	if e["lock"] != "lost" || e["token"] != tok || e["reason"] != "lost" {
		t.Errorf("event %v, want lock_lost of lost token %s, reason lost", e, tok)
	}
	if d := time.Since(begun); d > 5*time.Second {
		t.Errorf("the long-poll returned %v after the loss", d)
	}
	ka := g.do("POST", "/v1/sessions/"+a+"/keepalive", "", nil).want(t, 200, "")
	if locks, _ := ka.body["locks"].([]any); len(locks) != 0 {
		t.Errorf("locks after the loss: %s", ka.raw)
	}
	g.do("POST", "/v1/locks/lost/release", "", map[string]any{"session": a, "token": tok}).want(t, 409, gateway.ProblemNotHeld)
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.idle()
}

func TestKeepaliveReportsAtRiskThenDeadline(t *testing.T) {
	f := distlocktest.NewFaulty(memlock.New())
	g := start(t, f)
	a := g.session("", "a", "600ms")
	g.acquire("", a, "risk", "0").want(t, 200, "")
	f.Partition("risk") // renewals fail from now on
	if e := g.events("", a, "at_risk"); e["lock"] != "risk" {
		t.Errorf("at_risk event %v", e)
	}
	if e := g.events("", a, "lock_lost"); e["reason"] != "deadline_passed" {
		t.Errorf("lock_lost event %v, want reason deadline_passed", e)
	}
	f.Heal()
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.idle()
}

func TestForcedReleaseNeedsAdminAndIsReported(t *testing.T) {
	tokens, err := gateway.ParseTokens([]byte(`{"tokens":[
		{"name":"app","token":"app-secret-0123456789","prefixes":["jobs/"]},
		{"name":"ops","token":"ops-secret-0123456789","prefixes":[""],"admin":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, fileBackend(t), gateway.WithTokens(tokens))
	const app, ops = "app-secret-0123456789", "ops-secret-0123456789"
	a := g.session(app, "a", "10s")
	tok := g.acquire(app, a, "jobs/x", "0").want(t, 200, "").str("token")
	g.do("POST", "/v1/locks/jobs%2Fx/release", app, map[string]any{"force": true}).want(t, 403, gateway.ProblemForbidden)
	g.do("POST", "/v1/locks/jobs%2Fx/release", ops, map[string]any{"force": true}).want(t, 200, "")
	if e := g.events(app, a, "lock_lost"); e["reason"] != "forced_release" || e["token"] != tok {
		t.Errorf("event %v", e)
	}
	g.do("DELETE", "/v1/sessions/"+a, app, nil).want(t, 204, "")
	g.idle()
}

// Without tokens every caller is trusted alike, and a forced release,
// which takes a lock from its holder, is refused unless the operator
// allowed it (WithForceWithoutTokens); the dashboard then offers no
// forced release. With tokens the admin scope decides instead.
func TestForcedReleaseWithoutTokens(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		t.Run(fmt.Sprintf("allowed=%v", allowed), func(t *testing.T) {
			var opts []gateway.Option
			status, typ := 403, gateway.ProblemForbidden
			if allowed {
				opts = append(opts, gateway.WithForceWithoutTokens())
				status, typ = 200, ""
			}
			g := start(t, fileBackend(t), opts...)
			a := g.session("", "a", "10s")
			g.acquire("", a, "jobs/x", "0").want(t, 200, "")
			if d := g.do("GET", "/v1/dashboard", "", nil).want(t, 200, ""); d.body["admin"] != allowed {
				t.Errorf("the dashboard answers admin %v, want %v", d.body["admin"], allowed)
			}
			g.do("POST", "/v1/locks/jobs%2Fx/release", "", map[string]any{"force": true}).want(t, status, typ)
			if held := g.do("GET", "/v1/locks/jobs%2Fx", "", nil).want(t, 200, "").body["held"]; held != !allowed {
				t.Errorf("after the forced release the lock is held: %v, want %v", held, !allowed)
			}
			g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
			g.idle()
		})
	}
	toks, err := gateway.ParseTokens([]byte(`{"tokens":[{"name":"ops","token":"ops-secret-0123456789","prefixes":[""],"admin":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.New(fileBackend(t), gateway.WithTokens(toks), gateway.WithForceWithoutTokens()); !errors.Is(err, gateway.ErrInvalidOption) {
		t.Errorf("New with tokens and WithForceWithoutTokens: %v, want ErrInvalidOption", err)
	}
	g, err := gateway.New(fileBackend(t), nil, gateway.WithMaxLocks(2), nil)
	if err != nil {
		t.Fatalf("New with nil options (ignored): %v", err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g.Close(cctx)
}

func TestSupersededKeepalive(t *testing.T) {
	g := start(t, fileBackend(t))
	a := g.session("", "a", "10s")
	got := make(chan answer, 1)
	go func() { got <- g.do("POST", "/v1/sessions/"+a+"/keepalive?wait=30s", "", nil) }()
	waitFor(t, 10*time.Second, "the keepalive does not wait", func() bool { return g.g.Stats().Waiting == 1 })
	g.do("POST", "/v1/sessions/"+a+"/keepalive", "", nil).want(t, 200, "")
	if old := (<-got).want(t, 200, ""); old.body["superseded"] != true {
		t.Errorf("older keepalive: %s", old.raw)
	}
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.idle()
}

func TestRestartedGatewayForgetsSessions(t *testing.T) {
	b := fileBackend(t)
	g1 := start(t, b)
	sid := g1.session("", "a", "10s")
	g2 := start(t, b)
	a := g2.do("POST", "/v1/sessions/"+sid+"/keepalive", "", nil).want(t, 404, gateway.ProblemSessionNotFound)
	if !strings.Contains(a.str("detail"), "another instance") {
		t.Errorf("detail %q does not say the session is of another instance", a.str("detail"))
	}
	g1.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
}

func TestRetriedAcquiresShareOneWait(t *testing.T) {
	g := start(t, fileBackend(t))
	a, b := g.session("", "a", "10s"), g.session("", "b", "10s")
	tok := g.acquire("", a, "r", "0").want(t, 200, "").str("token")
	var wg sync.WaitGroup
	got := make([]answer, 3)
	for i := range got {
		wg.Go(func() { got[i] = g.acquire("", b, "r", "20s") })
	}
	waitFor(t, 10*time.Second, "the acquires do not wait", func() bool { return g.g.Stats().Waiting == 3 })
	g.do("POST", "/v1/locks/r/release", "", map[string]any{"session": a, "token": tok}).want(t, 200, "")
	wg.Wait()
	for i := range got {
		got[i].want(t, 200, "")
		if got[i].str("token") != got[0].str("token") {
			t.Errorf("retried acquires got tokens %s and %s", got[0].str("token"), got[i].str("token"))
		}
	}
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
	g.idle()
}

func TestCloseReleasesAndEndsWaits(t *testing.T) {
	b := fileBackend(t)
	g := start(t, b)
	a, c := g.session("", "a", "10s"), g.session("", "c", "10s")
	g.acquire("", a, "z", "0").want(t, 200, "")
	got := make(chan answer, 1)
	go func() { got <- g.acquire("", c, "z", "30s") }()
	waitFor(t, 10*time.Second, "the acquire does not wait", func() bool { return g.g.Stats().Waiting == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if a := <-got; a.status != http.StatusNotFound && a.status != http.StatusServiceUnavailable {
		t.Errorf("waiting acquire after Close: %d %s", a.status, a.raw)
	}
	if s := g.g.Stats(); s.Sessions != 0 || s.Locks != 0 {
		t.Errorf("after Close: %+v", s)
	}
	g2 := start(t, b) // the lock was released
	s := g2.session("", "d", "10s")
	g2.acquire("", s, "z", "0").want(t, 200, "")
	g2.do("DELETE", "/v1/sessions/"+s, "", nil).want(t, 204, "")
}
