package gateway_test

import (
	"strconv"
	"testing"

	"github.com/distlock/distlock/memlock"
)

// POST /v1/locks/{name}/owner replaces the owner of the session's lock at
// the lock service (the service's listing, a read of the lock and the
// event stream report it), and is owner-checked: another token, another
// session, a term, a released lock change nothing.
func TestLockOwnerChange(t *testing.T) {
	mb := memlock.New()
	g := start(t, mb)
	st := g.stream("", "?prefix=jobs/", "")
	a := g.session("", "alice", "10s")
	tok := g.acquire("", a, "jobs/1", "0").want(t, 200, "").str("token")
	if e := st.next(); e.typ != "granted" || e.data["owner"] != "alice" {
		t.Fatalf("first event %+v", e)
	}
	setOwner := func(sid, token string, owner any) answer {
		t.Helper()
		return g.do("POST", "/v1/locks/jobs%2F1/owner", "", map[string]any{"session": sid, "token": token, "owner": owner})
	}
	if a := setOwner(a, tok, "bob").want(t, 200, ""); a.str("owner") != "bob" || a.str("token") != tok {
		t.Errorf("answer %s", a.raw)
	}
	if e := st.next(); e.typ != "owner" || e.data["owner"] != "bob" || e.data["token"] != tok || e.data["lock"] != "jobs/1" {
		t.Errorf("owner event %+v", e)
	}
	wantOwner := func(what, owner string) {
		t.Helper()
		read := g.do("GET", "/v1/locks/jobs%2F1", "", nil).want(t, 200, "")
		if h, _ := read.body["holder"].(map[string]any); h["owner"] != owner || h["token"] != tok {
			t.Errorf("%s: read of the lock %s, want owner %q", what, read.raw, owner)
		}
		list := g.do("GET", "/v1/locks?prefix=jobs/", "", nil).want(t, 200, "")
		if ls, _ := list.body["locks"].([]any); len(ls) != 1 || ls[0].(map[string]any)["owner"] != owner {
			t.Errorf("%s: the service's listing %s, want owner %q", what, list.raw, owner)
		}
	}
	wantOwner("after the change", "bob")

	n, _ := strconv.ParseUint(tok, 10, 64)
	b := g.session("", "carol", "10s")
	for name, tc := range map[string]struct {
		sid, token string
		owner      any
		status     int
		problem    string
	}{
		"another token":      {a, strconv.FormatUint(n+1, 10), "mallory", 409, "urn:distlock:problem:not-held"},
		"another session":    {b, tok, "mallory", 409, "urn:distlock:problem:not-held"},
		"control characters": {a, tok, "mal\x1blory", 400, "urn:distlock:problem:bad-request"},
		"no owner":           {a, tok, nil, 400, "urn:distlock:problem:bad-request"},
	} {
		if r := setOwner(tc.sid, tc.token, tc.owner); r.status != tc.status || r.str("type") != tc.problem {
			t.Errorf("%s: %d %s, want %d %s", name, r.status, r.raw, tc.status, tc.problem)
		}
	}
	wantOwner("after the refused changes", "bob")

	// A term's value changes with proclaim only, and is reported as its
	// owner, whatever its session's.
	est := g.stream("", "?prefix=election/", "")
	term := g.do("POST", "/v1/elections/x/campaign", "", map[string]any{"session": a, "value": "v"}).want(t, 200, "")
	if e := est.next(); e.typ != "granted" || e.data["owner"] != "v" {
		t.Errorf("term's event %+v, want granted with owner v", e)
	}
	g.do("POST", "/v1/locks/election%2Fx/owner", "", map[string]any{"session": a, "token": term.str("token"), "owner": "w"}).
		want(t, 409, "urn:distlock:problem:not-held")
	g.do("POST", "/v1/elections/x/proclaim", "", map[string]any{"session": a, "token": term.str("token"), "value": "w"}).want(t, 200, "")
	if e := est.next(); e.typ != "owner" || e.data["owner"] != "w" {
		t.Errorf("event after proclaim %+v, want owner w", e)
	}
	read := g.do("GET", "/v1/locks/election%2Fx", "", nil).want(t, 200, "")
	if h, _ := read.body["holder"].(map[string]any); h["owner"] != "w" {
		t.Errorf("read of the term's lock %s, want owner w", read.raw)
	}

	g.do("POST", "/v1/locks/jobs%2F1/release", "", map[string]any{"session": a, "token": tok}).want(t, 200, "")
	setOwner(a, tok, "late").want(t, 409, "urn:distlock:problem:not-held")
	if e := st.next(); e.typ != "released" {
		t.Errorf("event after the release %+v, want released and no owner event", e)
	}
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
	g.idle()
}
