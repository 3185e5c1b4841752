package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

// electionBackends are the backends the election tests run over: the
// gateway's default (file) and the reference (memory).
var electionBackends = []struct {
	name string
	open func(t *testing.T) driver.Backend
}{
	{"file", fileBackend},
	{"memory", func(*testing.T) driver.Backend { return memlock.New() }},
}

func forElectionBackends(t *testing.T, f func(t *testing.T, g *gw)) {
	for _, b := range electionBackends {
		t.Run(b.name, func(t *testing.T) { f(t, start(t, b.open(t))) })
	}
}

// campaign campaigns in the election name for session sid.
func (g *gw) campaign(token, sid, name, value, wait string) answer {
	g.t.Helper()
	return g.do("POST", "/v1/elections/"+esc(name)+"/campaign?wait="+wait, token,
		map[string]any{"session": sid, "value": value})
}

// electionOp posts op (resign, proclaim) for the term tok of session sid.
func (g *gw) electionOp(token, op, sid, name, tok string, extra map[string]any) answer {
	g.t.Helper()
	body := map[string]any{"session": sid, "token": tok}
	for k, v := range extra {
		body[k] = v
	}
	return g.do("POST", "/v1/elections/"+esc(name)+"/"+op, token, body)
}

// campaignAsync campaigns in a goroutine; the answer arrives on the
// channel.
func (g *gw) campaignAsync(sid, name, value string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		// (Not g.do, whose failures are for the test's goroutine.)
		out <- g.doAsync("POST", "/v1/elections/"+esc(name)+"/campaign?wait=50s", map[string]any{"session": sid, "value": value})
	}()
	return out
}

// doAsync is do for another goroutine than the test's: a failure is an
// answer with status -1.
func (g *gw) doAsync(method, path string, body any) answer {
	data, _ := json.Marshal(body)
	req, err := http.NewRequest(method, g.url+path, bytes.NewReader(data))
	if err != nil {
		return answer{status: -1, raw: []byte(err.Error())}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.hc.Do(req)
	if err != nil {
		return answer{status: -1, raw: []byte(err.Error())}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: raw}
	json.Unmarshal(raw, &a.body)
	return a
}

// recv waits for an answer of campaignAsync.
func recv(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(time.Minute):
		t.Fatal("no answer in a minute")
		return answer{}
	}
}

func tokenOf(t *testing.T, a answer) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(a.str("token"), 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("token %q: %s", a.str("token"), a.raw)
	}
	return n
}

// Two campaigners: one leader at a time, the second elected when the
// first resigns, with a greater token; leader answers each in turn, and
// 404 when there is none.
func TestElectionOneLeaderAtATime(t *testing.T) {
	forElectionBackends(t, func(t *testing.T, g *gw) {
		g.do("GET", "/v1/elections/svc%2Fleader/leader", "", nil).want(t, 404, gateway.ProblemNoLeader)
		a := g.session("", "alice", "10s")
		b := g.session("", "bob", "10s")
		ta := g.campaign("", a, "svc/leader", "10.0.0.1:80", "10s").want(t, 200, "")
		if ta.str("value") != "10.0.0.1:80" || ta.str("lock") != "election/svc/leader" || ta.num("ttl_remaining_ms") <= 0 {
			t.Errorf("term %s", ta.raw)
		}
		bc := g.campaignAsync(b, "svc/leader", "10.0.0.2:80")
		waitFor(t, 10*time.Second, "bob's campaign does not wait", func() bool { return g.g.Stats().Waiting == 1 })
		l := g.do("GET", "/v1/elections/svc%2Fleader/leader", "", nil).want(t, 200, "")
		if l.str("token") != ta.str("token") || l.str("value") != "10.0.0.1:80" {
			t.Errorf("leader %s while alice leads (%s)", l.raw, ta.raw)
		}
		select {
		case x := <-bc:
			t.Fatalf("bob was elected while alice leads: %s", x.raw)
		default:
		}
		// A retried campaign answers the term the session holds.
		if again := g.campaign("", a, "svc/leader", "ignored", "1s").want(t, 200, ""); again.str("token") != ta.str("token") {
			t.Errorf("retried campaign: %s, want the term %s", again.raw, ta.raw)
		}
		r := g.electionOp("", "resign", a, "svc/leader", ta.str("token"), nil).want(t, 200, "")
		if r.body["resigned"] != true || r.str("token") != ta.str("token") {
			t.Errorf("resign: %s", r.raw)
		}
		tb := recv(t, bc).want(t, 200, "")
		if tokenOf(t, tb) <= tokenOf(t, ta) || tb.str("value") != "10.0.0.2:80" {
			t.Errorf("bob's term %s after alice's %s", tb.raw, ta.raw)
		}
		if l := g.do("GET", "/v1/elections/svc%2Fleader/leader", "", nil).want(t, 200, ""); l.str("token") != tb.str("token") {
			t.Errorf("leader %s, want bob's term %s", l.raw, tb.raw)
		}
		// A second resignation of alice's term ends nothing.
		g.electionOp("", "resign", a, "svc/leader", ta.str("token"), nil).want(t, 409, gateway.ProblemNotHeld)
		g.electionOp("", "resign", b, "svc/leader", tb.str("token"), nil).want(t, 200, "")
		g.do("GET", "/v1/elections/svc%2Fleader/leader", "", nil).want(t, 404, gateway.ProblemNoLeader)
		g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
		g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
		g.idle()
	})
}

// A campaigner whose session dies (no keepalive for its TTL) loses its
// term: the term's context is cancelled before the next candidate is
// elected.
func TestElectionSessionDeathEndsTerm(t *testing.T) {
	forElectionBackends(t, func(t *testing.T, g *gw) {
		a := g.session("", "alice", "300ms")
		b := g.session("", "bob", "10s")
		ta := g.campaign("", a, "jobs", "alice", "10s").want(t, 200, "")
		done := gateway.TermDone(g.g, a, "jobs")
		if done == nil {
			t.Fatal("alice's session holds no term")
		}
		bc := g.campaignAsync(b, "jobs", "bob")
		// Alice sends no keepalive: her session expires.
		tb := recv(t, bc).want(t, 200, "")
		select {
		case <-done:
		default:
			t.Fatal("bob was elected while alice's term lived")
		}
		if tokenOf(t, tb) <= tokenOf(t, ta) {
			t.Errorf("bob's token %s after alice's %s", tb.str("token"), ta.str("token"))
		}
		g.do("POST", "/v1/sessions/"+a+"/keepalive", "", nil).want(t, 404, gateway.ProblemSessionNotFound)
		g.electionOp("", "resign", a, "jobs", ta.str("token"), nil).want(t, 404, gateway.ProblemSessionNotFound)
		g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
		g.idle()
	})
}

// A campaign that waits when its session is deleted ends with 404 and
// never leaves a term behind.
func TestElectionCampaignEndsWithSession(t *testing.T) {
	forElectionBackends(t, func(t *testing.T, g *gw) {
		a := g.session("", "alice", "10s")
		b := g.session("", "bob", "10s")
		ta := g.campaign("", a, "jobs", "alice", "10s").want(t, 200, "")
		bc := g.campaignAsync(b, "jobs", "bob")
		waitFor(t, 10*time.Second, "bob's campaign does not wait", func() bool { return g.g.Stats().Waiting == 1 })
		g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
		recv(t, bc).want(t, 404, gateway.ProblemSessionNotFound)
		g.electionOp("", "resign", a, "jobs", ta.str("token"), nil).want(t, 200, "")
		g.do("GET", "/v1/elections/jobs/leader", "", nil).want(t, 404, gateway.ProblemNoLeader)
		g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
		g.idle()
	})
}

// A stale term's token (an earlier term's of the same session, or
// another session's) never resigns, nor proclaims in, a later term.
func TestElectionStaleTokenRefused(t *testing.T) {
	forElectionBackends(t, func(t *testing.T, g *gw) {
		a := g.session("", "alice", "10s")
		b := g.session("", "bob", "10s")
		t1 := g.campaign("", a, "db", "v1", "10s").want(t, 200, "")
		g.electionOp("", "resign", a, "db", t1.str("token"), nil).want(t, 200, "")
		t2 := g.campaign("", a, "db", "v2", "10s").want(t, 200, "")
		if tokenOf(t, t2) <= tokenOf(t, t1) {
			t.Fatalf("second term %s after %s", t2.raw, t1.raw)
		}
		g.electionOp("", "resign", a, "db", t1.str("token"), nil).want(t, 409, gateway.ProblemNotHeld)
		g.electionOp("", "proclaim", a, "db", t1.str("token"), map[string]any{"value": "stale"}).want(t, 409, gateway.ProblemNotHeld)
		g.electionOp("", "resign", b, "db", t2.str("token"), nil).want(t, 409, gateway.ProblemNotHeld)
		l := g.do("GET", "/v1/elections/db/leader", "", nil).want(t, 200, "")
		if l.str("token") != t2.str("token") || l.str("value") != "v2" {
			t.Fatalf("leader %s after stale requests, want the term %s untouched", l.raw, t2.raw)
		}
		p := g.electionOp("", "proclaim", a, "db", t2.str("token"), map[string]any{"value": "v3"}).want(t, 200, "")
		if p.str("value") != "v3" || p.str("token") != t2.str("token") {
			t.Errorf("proclaim: %s", p.raw)
		}
		if l := g.do("GET", "/v1/elections/db/leader", "", nil).want(t, 200, ""); l.str("value") != "v3" {
			t.Errorf("leader %s after proclaim", l.raw)
		}
		g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
		g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
		g.idle()
	})
}

// leaderState is what an observe event says: "" for no leader, else
// token=value.
func leaderState(t *testing.T, e sseEvent) string {
	t.Helper()
	switch e.typ {
	case "no_leader":
		return ""
	case "leader":
		tok, _ := e.data["token"].(string)
		v, _ := e.data["value"].(string)
		return tok + "=" + v
	}
	t.Fatalf("event %q: %s", e.typ, e.raw)
	return ""
}

// Observe sends the leader as it changes, in term order, with "no
// leader" as an event: each state is awaited before the next change, so
// that every one of them must be seen.
func TestElectionObserve(t *testing.T) {
	forElectionBackends(t, func(t *testing.T, g *gw) {
		st := g.streamAt("", "/v1/elections/svc%2Fapi/observe", "")
		var seen []string
		var last uint64
		await := func(want string) {
			t.Helper()
			for {
				e := st.next()
				got := leaderState(t, e)
				seen = append(seen, got)
				if tok, _ := strconv.ParseUint(strings.SplitN(got, "=", 2)[0], 10, 64); tok != 0 {
					if tok < last {
						t.Fatalf("token %d after %d: not in term order (%q)", tok, last, seen)
					}
					last = tok
				}
				if got == want {
					return
				}
			}
		}
		await("")
		a := g.session("", "alice", "10s")
		b := g.session("", "bob", "10s")
		ta := g.campaign("", a, "svc/api", "a1", "10s").want(t, 200, "").str("token")
		await(ta + "=a1")
		g.electionOp("", "proclaim", a, "svc/api", ta, map[string]any{"value": "a2"}).want(t, 200, "")
		await(ta + "=a2")
		g.electionOp("", "resign", a, "svc/api", ta, nil).want(t, 200, "")
		await("")
		tb := g.campaign("", b, "svc/api", "b1", "10s").want(t, 200, "").str("token")
		await(tb + "=b1")
		// A term ended by its session's end shows as no leader too.
		g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
		await("")
		for _, s := range seen {
			if s != "" && s != ta+"=a1" && s != ta+"=a2" && s != tb+"=b1" {
				t.Errorf("a state that never was: %q in %q", s, seen)
			}
		}
		g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	})
}

// The leader's value is the service's, whoever wrote it: a control
// character in it (a C1 control, which JSON leaves raw) is escaped in
// every answer.
func TestElectionLeaderValueEscaped(t *testing.T) {
	b := memlock.New()
	g := start(t, b)
	c, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	e, err := election.New(c, "raw")
	if err != nil {
		t.Fatal(err)
	}
	const value = "evil\u009b31m\u007f"
	term, err := e.Campaign(context.Background(), value)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Resign(context.Background())
	l := g.do("GET", "/v1/elections/raw/leader", "", nil).want(t, 200, "")
	if l.str("value") != value || strings.ContainsAny(string(l.raw), "\u009b\u007f") {
		t.Errorf("leader %q: want the value, escaped", l.raw)
	}
	st := g.streamAt("", "/v1/elections/raw/observe", "")
	ev := st.next()
	if ev.data["value"] != value || strings.ContainsAny(ev.raw, "\u009b\u007f") {
		t.Errorf("observe %q: want the value, escaped", ev.raw)
	}
}

func TestElectionBadRequests(t *testing.T) {
	g := authGateway(t)
	sid := g.session(jobsSecret, "j", "10s")
	long := strings.Repeat("x", driver.MaxKeyLen-len(election.KeyPrefix)+1)
	// Elections are the lock names election/NAME: the jobs token may use
	// none, the admin token every one; the session is the jobs token's.
	for _, c := range []struct {
		what, token, method, path string
		body                      any
		status                    int
		typ                       string
	}{
		{"control character", adminSecret, "GET", "/v1/elections/a%01b/leader", nil, 400, gateway.ProblemBadName},
		{"name too long with its prefix", adminSecret, "GET", "/v1/elections/" + long + "/leader", nil, 400, gateway.ProblemBadName},
		{"raw slash", adminSecret, "GET", "/v1/elections/a/b/leader", nil, 400, gateway.ProblemBadName},
		{"no operation", adminSecret, "GET", "/v1/elections/x", nil, 404, gateway.ProblemNotFound},
		{"campaign outside the token's prefixes", jobsSecret, "POST", "/v1/elections/jobs%2Fx/campaign?wait=1s",
			map[string]any{"session": sid}, 403, gateway.ProblemForbidden},
		{"observe outside the token's prefixes", jobsSecret, "GET", "/v1/elections/jobs%2Fx/observe", nil, 403, gateway.ProblemForbidden},
		{"leader outside the token's prefixes", jobsSecret, "GET", "/v1/elections/jobs%2Fx/leader", nil, 403, gateway.ProblemForbidden},
		{"control character in the value", adminSecret, "POST", "/v1/elections/x/campaign?wait=1s",
			map[string]any{"session": sid, "value": "a\u0085b"}, 400, gateway.ProblemBadRequest},
		{"value too long", adminSecret, "POST", "/v1/elections/x/campaign?wait=1s",
			map[string]any{"session": sid, "value": strings.Repeat("v", 1025)}, 400, gateway.ProblemBadRequest},
		{"unknown session", adminSecret, "POST", "/v1/elections/x/campaign?wait=1s",
			map[string]any{"session": "nope"}, 404, gateway.ProblemSessionNotFound},
		{"another token's session", otherSecret, "POST", "/v1/elections/x/campaign?wait=1s",
			map[string]any{"session": sid}, 403, gateway.ProblemForbidden},
		{"resign without a token", adminSecret, "POST", "/v1/elections/x/resign", map[string]any{"session": sid}, 400, gateway.ProblemBadRequest},
		{"proclaim without a value", adminSecret, "POST", "/v1/elections/x/proclaim",
			map[string]any{"session": sid, "token": "1"}, 400, gateway.ProblemBadRequest},
		{"resign of no term", adminSecret, "POST", "/v1/elections/x/resign", map[string]any{"session": sid, "token": "1"}, 409, gateway.ProblemNotHeld},
	} {
		t.Run(c.what, func(t *testing.T) {
			a := g.do(c.method, c.path, c.token, c.body).want(t, c.status, c.typ)
			if strings.ContainsAny(string(a.raw), "\x01\u0085") {
				t.Errorf("a control character in the answer: %q", a.raw)
			}
		})
	}
	if s := g.g.Stats(); s.Locks != 0 || s.Waiting != 0 {
		t.Errorf("refused requests left %+v", s)
	}
}

// A session's term and its lock of the same key are not each other: a
// session that holds the election's key as a lock cannot campaign, and
// one that leads cannot acquire the key as a lock.
func TestElectionTermIsNotALock(t *testing.T) {
	g := start(t, memlock.New())
	a := g.session("", "alice", "10s")
	g.acquire("", a, "election/x", "0").want(t, 200, "")
	g.campaign("", a, "x", "v", "1s").want(t, 409, gateway.ProblemNotElected)
	b := g.session("", "bob", "10s")
	tb := g.campaign("", b, "y", "v", "1s").want(t, 200, "")
	g.acquire("", b, "election/y", "0").want(t, 409, gateway.ProblemNotAcquired)
	// Another candidate's wait ends with the leader in the problem.
	nc := g.campaign("", a, "y", "w", "50ms").want(t, 409, gateway.ProblemNotElected)
	if ld, _ := nc.body["leader"].(map[string]any); ld["token"] != tb.str("token") || ld["value"] != "v" {
		t.Errorf("not elected: %s, want the leader %s", nc.raw, tb.raw)
	}
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
	g.idle()
}

// A term forced away is reported by the session's keepalive as the loss
// of the lock election/NAME, and can no longer be resigned.
func TestElectionTermLossReported(t *testing.T) {
	g := start(t, memlock.New(), gateway.WithForceWithoutTokens())
	a := g.session("", "alice", "10s")
	ta := g.campaign("", a, "svc", "v", "10s").want(t, 200, "")
	g.do("POST", "/v1/locks/election%2Fsvc/release", "", map[string]any{"force": true}).want(t, 200, "")
	k := g.do("POST", "/v1/sessions/"+a+"/keepalive?wait=10s", "", nil).want(t, 200, "")
	evs, _ := k.body["events"].([]any)
	if len(evs) != 1 {
		t.Fatalf("keepalive: %s, want the term's loss", k.raw)
	}
	if ev, _ := evs[0].(map[string]any); ev["type"] != "lock_lost" || ev["lock"] != "election/svc" ||
		ev["token"] != ta.str("token") || ev["reason"] != "forced_release" {
		t.Errorf("event %v, want the loss of the term %s", ev, ta.raw)
	}
	g.electionOp("", "resign", a, "svc", ta.str("token"), nil).want(t, 409, gateway.ProblemNotHeld)
	g.do("GET", "/v1/elections/svc/leader", "", nil).want(t, 404, gateway.ProblemNoLeader)
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.idle()
}

// An observe stream counts among the event streams, and ends when the
// gateway closes.
func TestElectionObserveStreams(t *testing.T) {
	g := start(t, memlock.New(), gateway.WithMaxStreams(1))
	st := g.streamAt("", "/v1/elections/svc/observe", "")
	if e := st.next(); e.typ != "no_leader" {
		t.Fatalf("first event %q: %s", e.typ, e.raw)
	}
	g.do("GET", "/v1/elections/svc/observe", "", nil).want(t, 429, gateway.ProblemTooMany)
	g.do("GET", "/v1/events", "", nil).want(t, 429, gateway.ProblemTooMany)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case e, ok := <-st.events:
			if !ok {
				return // the stream ended
			}
			if e.comment != "heartbeat" {
				t.Fatalf("event %q after Close: %s", e.typ, e.raw)
			}
		case <-ctx.Done():
			t.Fatal("the observe stream outlived the gateway's Close")
		}
	}
}

// An observe stream that opens as the gateway closes is refused 503 (the
// gateway is closing), not answered 200 with a stream that ends at once.
// (A Close between the stream's check of the gateway and the opening of
// its observation was answered 200 before.)
func TestElectionObserveWhileClosing(t *testing.T) {
	g := start(t, fileBackend(t))
	gateway.SetObserveOpening(g.g, func() {
		if err := g.g.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	g.do("GET", "/v1/elections/svc%2Fapi/observe", "", nil).want(t, 503, gateway.ProblemUnavailable)
}

// With WithMaxWait(0) no request waits: a campaign is a try, as an
// acquire is, elected at once when the election has no leader and
// answered 409 with the leader otherwise. (Every campaign was refused 400
// before, its wait capped to nothing.)
func TestElectionCampaignWithNoWait(t *testing.T) {
	for _, eb := range electionBackends {
		t.Run(eb.name, func(t *testing.T) {
			g := start(t, eb.open(t), gateway.WithMaxWait(0))
			a := g.session("", "alice", "10s")
			b := g.session("", "bob", "10s")
			for _, wait := range []string{"", "?wait=10s"} {
				ta := g.do("POST", "/v1/elections/svc%2Fapi/campaign"+wait, "", map[string]any{"session": a, "value": "a1"}).want(t, 200, "").str("token")
				lost := g.do("POST", "/v1/elections/svc%2Fapi/campaign"+wait, "", map[string]any{"session": b, "value": "b1"}).want(t, 409, gateway.ProblemNotElected)
				if l, _ := lost.body["leader"].(map[string]any); l["token"] != ta || l["value"] != "a1" {
					t.Errorf("campaign%s against a leader: leader %v, want token %s, value a1", wait, lost.body["leader"], ta)
				}
				g.electionOp("", "resign", a, "svc/api", ta, nil).want(t, 200, "")
			}
			if s := g.g.Stats(); s.Locks != 0 || s.Waiting != 0 {
				t.Errorf("tries left %+v", s)
			}
		})
	}
}

// A campaign with ?wait=0 is one try, as an acquire with wait 0 is:
// elected at once when the election has no leader, answered 409 with the
// leader while another leads, and elected again once that leader
// resigned. (It was refused 400 unless the gateway's WithMaxWait was 0, so
// that a one-try campaign was sent as the shortest wait, and refused
// "another leader" while nobody led when the grant took longer.)
func TestElectionCampaignWaitZeroIsATry(t *testing.T) {
	forElectionBackends(t, func(t *testing.T, g *gw) {
		a := g.session("", "alice", "10s")
		b := g.session("", "bob", "10s")
		ta := g.campaign("", a, "svc/api", "a1", "0").want(t, 200, "").str("token")
		lost := g.campaign("", b, "svc/api", "b1", "0").want(t, 409, gateway.ProblemNotElected)
		if l, _ := lost.body["leader"].(map[string]any); l["token"] != ta || l["value"] != "a1" {
			t.Errorf("a try against a leader: leader %v, want token %s, value a1", lost.body["leader"], ta)
		}
		g.electionOp("", "resign", a, "svc/api", ta, nil).want(t, 200, "")
		tb := g.campaign("", b, "svc/api", "b1", "0").want(t, 200, "").str("token")
		if x, y := parseTok(t, ta), parseTok(t, tb); y <= x {
			t.Errorf("term %d after term %d", y, x)
		}
		g.electionOp("", "resign", b, "svc/api", tb, nil).want(t, 200, "")
		if s := g.g.Stats(); s.Locks != 0 || s.Waiting != 0 {
			t.Errorf("tries left %+v", s)
		}
	})
}

func parseTok(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("token %q: %v", s, err)
	}
	return n
}
