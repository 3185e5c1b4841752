package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

// sse is an open event stream.
type sse struct {
	t      *testing.T
	cancel context.CancelFunc
	events chan sseEvent
}

type sseEvent struct {
	id, typ, comment string
	data             map[string]any
	raw              string // the data line as sent
}

func (g *gw) stream(token, query, lastID string) *sse {
	g.t.Helper()
	return g.streamAt(token, "/v1/events"+query, lastID)
}

// streamAt opens the event stream at path.
func (g *gw) streamAt(token, path, lastID string) *sse {
	g.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", g.url+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := g.hc.Do(req)
	if err != nil {
		cancel()
		g.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		g.t.Fatalf("GET %s: %s %s", path, resp.Status, resp.Header.Get("Content-Type"))
	}
	s := &sse{t: g.t, cancel: cancel, events: make(chan sseEvent, 100)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.typ != "" || e.comment != "" {
					s.events <- e
				}
				e = sseEvent{}
			case strings.HasPrefix(line, ":"):
				e.comment = strings.TrimSpace(line[1:])
			case strings.HasPrefix(line, "id: "):
				e.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.typ = line[7:]
			case strings.HasPrefix(line, "data: "):
				e.raw = line[6:]
				json.Unmarshal([]byte(e.raw), &e.data)
			}
		}
		close(s.events)
	}()
	g.t.Cleanup(func() { cancel(); <-done })
	return s
}

// next returns the next event that is not a heartbeat.
func (s *sse) next() sseEvent {
	s.t.Helper()
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				s.t.Fatal("the stream ended")
			}
			if e.comment == "heartbeat" {
				continue
			}
			return e
		case <-time.After(20 * time.Second):
			s.t.Fatal("no event in 20s")
		}
	}
}

func TestEventStream(t *testing.T) {
	mb := memlock.New()
	g := start(t, mb)
	st := g.stream("", "?prefix=jobs/", "")
	a := g.session("", "alice", "10s")
	tok := g.acquire("", a, "jobs/1", "0").want(t, 200, "").str("token")
	g.acquire("", a, "other/1", "0").want(t, 200, "") // not under the prefix
	e := st.next()
	if e.typ != "granted" || e.data["lock"] != "jobs/1" || e.data["token"] != tok || e.data["owner"] != "alice" || e.id == "" {
		t.Errorf("first event %+v", e)
	}
	g.do("POST", "/v1/locks/jobs%2F1/release", "", map[string]any{"session": a, "token": tok}).want(t, 200, "")
	rel := st.next()
	if rel.typ != "released" || rel.data["reason"] != "by_holder" {
		t.Errorf("release event %+v", rel)
	}
	tok2 := g.acquire("", a, "jobs/2", "0").want(t, 200, "").str("token")
	st.next() // granted
	mb.Revoke("jobs/2")
	if lost := st.next(); lost.typ != "lost" || lost.data["token"] != tok2 || lost.data["reason"] != "lost" {
		t.Errorf("loss event %+v", lost)
	}
	// Resume after the release: the later events again, and only those.
	re := g.stream("", "?prefix=jobs/", rel.id)
	if e := re.next(); e.typ != "granted" || e.data["lock"] != "jobs/2" {
		t.Errorf("first event after resuming: %+v", e)
	}
	if e := re.next(); e.typ != "lost" {
		t.Errorf("second event after resuming: %+v", e)
	}
	// An id of another gateway instance: a reset, then live events.
	other := g.stream("", "", "XXXXXXXXXX.3")
	if e := other.next(); e.typ != "reset" {
		t.Errorf("resuming another instance's id: %+v, want a reset event", e)
	}
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	if e := other.next(); e.typ != "released" || e.data["lock"] != "other/1" || e.data["reason"] != "session_deleted" {
		t.Errorf("after the session's end: %+v", e)
	}
	g.idle()
}

func TestEventStreamHeartbeatsAndAuth(t *testing.T) {
	tokens, err := gateway.ParseTokens([]byte(`{"tokens":[
		{"name":"jobs","token":"` + jobsSecret + `","prefixes":["jobs/"]},
		{"name":"admin","token":"` + adminSecret + `","prefixes":[""],"admin":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	g := start(t, fileBackend(t), gateway.WithTokens(tokens), gateway.WithHeartbeat(50*time.Millisecond), gateway.WithMaxStreams(2))
	g.do("GET", "/v1/events", "", nil).want(t, 401, gateway.ProblemUnauthorized)
	st := g.stream(jobsSecret, "", "")
	g.stream(adminSecret, "", "")
	g.do("GET", "/v1/events", adminSecret, nil).want(t, 429, gateway.ProblemTooMany)
	select {
	case e := <-st.events:
		if e.comment != "heartbeat" {
			t.Errorf("idle stream: %+v, want a heartbeat", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat")
	}
	// A token sees the events of its own names only.
	s := g.session(adminSecret, "ops", "10s")
	g.acquire(adminSecret, s, "secret/x", "0").want(t, 200, "")
	g.acquire(adminSecret, s, "jobs/x", "0").want(t, 200, "")
	if e := st.next(); e.data["lock"] != "jobs/x" {
		t.Errorf("the jobs token saw %+v", e)
	}
	g.do("DELETE", "/v1/sessions/"+s, adminSecret, nil).want(t, 204, "")
	g.idle()
}

func TestCloseEndsEventStreams(t *testing.T) {
	g := start(t, fileBackend(t))
	st := g.stream("", "", "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case _, ok := <-st.events:
			if !ok {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the stream outlived Close")
		}
	}
}

func TestBlockingRead(t *testing.T) {
	g := start(t, fileBackend(t))
	r := g.do("GET", "/v1/locks/jobs%2Fr", "", nil).want(t, 200, "")
	if r.body["held"] != false || r.header.Get("X-Distlock-Index") != r.str("index") {
		t.Fatalf("free lock: %s", r.raw)
	}
	a := g.session("", "alice", "10s")
	tok := g.acquire("", a, "jobs/r", "0").want(t, 200, "").str("token")
	held := g.do("GET", "/v1/locks/jobs%2Fr", "", nil).want(t, 200, "")
	if h, _ := held.body["holder"].(map[string]any); held.body["held"] != true || h["token"] != tok || h["owner"] != "alice" {
		t.Fatalf("held lock: %s", held.raw)
	}
	// A read at the current index waits for the next change.
	got := make(chan answer, 1)
	go func() { got <- g.do("GET", "/v1/locks/jobs%2Fr?wait=30s&index="+held.str("index"), "", nil) }()
	waitFor(t, 10*time.Second, "the read does not wait", func() bool { return g.g.Stats().Waiting == 1 })
	select {
	case a := <-got:
		t.Fatalf("answered before a change: %s", a.raw)
	default:
	}
	g.do("POST", "/v1/locks/jobs%2Fr/release", "", map[string]any{"session": a, "token": tok}).want(t, 200, "")
	after := (<-got).want(t, 200, "")
	if after.body["held"] != false || after.str("index") == held.str("index") {
		t.Errorf("after the release: %s", after.raw)
	}
	// A read at an index with no change returns when its wait ends.
	g.do("GET", "/v1/locks/jobs%2Fr?wait=50ms&index="+after.str("index"), "", nil).want(t, 200, "")
	g.do("GET", "/v1/locks/jobs%2Fr?index=x", "", nil).want(t, 400, gateway.ProblemBadRequest)
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.idle()
}

func TestListLocks(t *testing.T) {
	for name, b := range map[string]driver.Backend{
		"lock service lists": fileBackend(t),
		"gateway lists":      distlocktest.NewFaulty(memlock.New()), // no Lister
	} {
		t.Run(name, func(t *testing.T) {
			g := start(t, b)
			a := g.session("", "alice", "10s")
			tok := g.acquire("", a, "jobs/1", "0").want(t, 200, "").str("token")
			g.acquire("", a, "other/1", "0").want(t, 200, "")
			l := g.do("GET", "/v1/locks?prefix=jobs/", "", nil).want(t, 200, "")
			locks, _ := l.body["locks"].([]any)
			if len(locks) != 1 {
				t.Fatalf("listing: %s", l.raw)
			}
			if x := locks[0].(map[string]any); x["lock"] != "jobs/1" || x["token"] != tok || x["owner"] != "alice" {
				t.Errorf("listed %v", x)
			}
			g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
			if l := g.do("GET", "/v1/locks", "", nil).want(t, 200, ""); len(l.body["locks"].([]any)) != 0 {
				t.Errorf("after the session's end: %s", l.raw)
			}
			g.idle()
		})
	}
}
