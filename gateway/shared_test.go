package gateway_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

// acquireShared asks for a shared lock of name in session sid.
func (g *gw) acquireShared(sid, name, wait string) answer {
	g.t.Helper()
	return g.do("POST", "/v1/locks/"+esc(name)+"/acquire?wait="+wait, "", map[string]any{"session": sid, "shared": true})
}

// sharedToken reads the token of an answer, or of one of its objects.
func sharedToken(t *testing.T, m map[string]any) uint64 {
	t.Helper()
	s, _ := m["token"].(string)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("token %q: %v", s, err)
	}
	return n
}

// readersOf reads the readers of a lock's state, which must have them.
func readersOf(t *testing.T, a answer) []map[string]any {
	t.Helper()
	rs, ok := a.body["readers"].([]any)
	if !ok {
		t.Fatalf("lock state without readers: %s", a.raw)
	}
	var out []map[string]any
	for _, r := range rs {
		out = append(out, r.(map[string]any))
	}
	return out
}

// Sessions share a lock asked with shared, each grant with its own
// increasing token; an exclusive lock of the name is refused meanwhile,
// and a session's shared lock is not upgraded. The lock's state lists the
// readers by token with their owners and no holder, listings and
// keepalives mark them shared, and the sequencer check knows their tokens.
// A writer waiting for the readers is granted once both are released,
// and a reader's try fails while it holds.
func TestSharedLocks(t *testing.T) {
	g := start(t, memlock.New())
	a, b, c := g.session("", "a", "10s"), g.session("", "b", "10s"), g.session("", "c", "10s")
	ra := g.acquireShared(a, "data", "0").want(t, 200, "")
	rb := g.acquireShared(b, "data", "0").want(t, 200, "")
	ta, tb := sharedToken(t, ra.body), sharedToken(t, rb.body)
	if tb <= ta || ra.body["shared"] != true || ra.str("lock") != "data" {
		t.Fatalf("grants %s then %s; want shared grants of data, tokens increasing", ra.raw, rb.raw)
	}
	if again := g.acquireShared(a, "data", "0").want(t, 200, ""); sharedToken(t, again.body) != ta {
		t.Fatalf("a retried shared acquire answered %s; want the grant of token %d", again.raw, ta)
	}
	g.acquire("", a, "data", "0").want(t, 409, gateway.ProblemNotAcquired) // no upgrade
	g.acquire("", c, "data", "0").want(t, 409, gateway.ProblemNotAcquired)
	g.acquire("", c, "data", "50ms").want(t, 409, gateway.ProblemNotAcquired)

	st := g.do("GET", "/v1/locks/data", "", nil).want(t, 200, "")
	rs := readersOf(t, st)
	if st.body["held"] != false || st.body["holder"] != nil || len(rs) != 2 ||
		sharedToken(t, rs[0]) != ta || rs[0]["owner"] != "a" || sharedToken(t, rs[1]) != tb || rs[1]["owner"] != "b" {
		t.Fatalf("state: %s; want no holder and readers a (%d) and b (%d)", st.raw, ta, tb)
	}
	ls := g.do("GET", "/v1/locks?prefix=data", "", nil).want(t, 200, "")
	locks, _ := ls.body["locks"].([]any)
	if len(locks) != 2 {
		t.Fatalf("listing: %s; want both readers", ls.raw)
	}
	for i, want := range []uint64{ta, tb} {
		if l := locks[i].(map[string]any); l["shared"] != true || sharedToken(t, l) != want {
			t.Fatalf("listing: %s; want entry %d shared with token %d", ls.raw, i, want)
		}
	}
	ka := g.do("POST", "/v1/sessions/"+a+"/keepalive", "", nil).want(t, 200, "")
	if kl, _ := ka.body["locks"].([]any); len(kl) != 1 || kl[0].(map[string]any)["shared"] != true {
		t.Fatalf("keepalive: %s; want the shared lock", ka.raw)
	}
	for tok, want := range map[uint64]bool{ta: true, tb: true, tb + 1: false} {
		chk := g.do("POST", "/v1/locks/data/check", "", map[string]any{"token": strconv.FormatUint(tok, 10)}).want(t, 200, "")
		if chk.body["current"] != false || (chk.body["reader"] == true) != want {
			t.Fatalf("check of %d: %s; want current false and reader %v", tok, chk.raw, want)
		}
	}

	got := make(chan answer, 1)
	go func() { got <- g.acquire("", c, "data", "30s") }()
	waitFor(t, 10*time.Second, "the writer does not wait", func() bool { return g.g.Stats().Waiting == 1 })
	for sid, tok := range map[string]uint64{a: ta, b: tb} {
		g.do("POST", "/v1/locks/data/release", "", map[string]any{"session": sid, "token": strconv.FormatUint(tok, 10)}).
			want(t, 200, "")
	}
	w := (<-got).want(t, 200, "")
	if tw := sharedToken(t, w.body); tw <= tb || w.body["shared"] != nil {
		t.Fatalf("writer: %s; want an exclusive grant with a token above %d", w.raw, tb)
	}
	g.acquireShared(a, "data", "0").want(t, 409, gateway.ProblemNotAcquired)
	st = g.do("GET", "/v1/locks/data", "", nil).want(t, 200, "")
	if rs := readersOf(t, st); st.body["held"] != true || len(rs) != 0 {
		t.Fatalf("state while the writer holds: %s; want it held and no reader", st.raw)
	}
	g.acquireShared(c, "data", "0").want(t, 409, gateway.ProblemNotAcquired) // held exclusive
	for _, sid := range []string{a, b, c} {
		g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
	}
	g.idle()
}

// A session that ends gives its shared locks back.
func TestSharedLockEndsWithSession(t *testing.T) {
	g := start(t, memlock.New())
	a, b := g.session("", "a", "10s"), g.session("", "b", "10s")
	g.acquireShared(a, "s", "0").want(t, 200, "")
	g.do("DELETE", "/v1/sessions/"+a, "", nil).want(t, 204, "")
	g.acquire("", b, "s", "0").want(t, 200, "")
	if rs := readersOf(t, g.do("GET", "/v1/locks/s", "", nil).want(t, 200, "")); len(rs) != 0 {
		t.Fatalf("readers after the session ended: %v", rs)
	}
	g.do("DELETE", "/v1/sessions/"+b, "", nil).want(t, 204, "")
	g.idle()
}

// A forced release reaches shared locks: with a token, that reader only
// (another token is refused); without one, every reader of the name. Each
// reader's keepalive reports the loss as forced.
func TestSharedLocksForcedRelease(t *testing.T) {
	g := start(t, memlock.New(), gateway.WithForceWithoutTokens())
	a, b, c := g.session("", "a", "10s"), g.session("", "b", "10s"), g.session("", "c", "10s")
	ta := sharedToken(t, g.acquireShared(a, "f", "0").want(t, 200, "").body)
	tb := sharedToken(t, g.acquireShared(b, "f", "0").want(t, 200, "").body)
	tc := sharedToken(t, g.acquireShared(c, "f", "0").want(t, 200, "").body)
	g.do("POST", "/v1/locks/f/release", "", map[string]any{"force": true, "token": strconv.FormatUint(tc+1, 10)}).
		want(t, 409, gateway.ProblemNotHeld)
	rel := g.do("POST", "/v1/locks/f/release", "", map[string]any{"force": true, "token": strconv.FormatUint(ta, 10)}).
		want(t, 200, "")
	if sharedToken(t, rel.body) != ta {
		t.Fatalf("forced release of %d: %s", ta, rel.raw)
	}
	if e := g.events("", a, "lock_lost"); e["reason"] != "forced_release" || sharedToken(t, e) != ta {
		t.Fatalf("event of the forced reader: %v", e)
	}
	if rs := readersOf(t, g.do("GET", "/v1/locks/f", "", nil).want(t, 200, "")); len(rs) != 2 {
		t.Fatalf("readers after one forced release: %v; want the other 2", rs)
	}
	rel = g.do("POST", "/v1/locks/f/release", "", map[string]any{"force": true}).want(t, 200, "")
	if ts, _ := rel.body["tokens"].([]any); len(ts) != 2 || ts[0] != strconv.FormatUint(tb, 10) || ts[1] != strconv.FormatUint(tc, 10) {
		t.Fatalf("forced release of every reader: %s; want tokens %d and %d", rel.raw, tb, tc)
	}
	for sid, tok := range map[string]uint64{b: tb, c: tc} {
		if e := g.events("", sid, "lock_lost"); e["reason"] != "forced_release" || sharedToken(t, e) != tok {
			t.Fatalf("event of a forced reader: %v; want token %d", e, tok)
		}
	}
	g.acquire("", a, "f", "0").want(t, 200, "")
	g.do("POST", "/v1/locks/f/release", "", map[string]any{"force": true}).want(t, 200, "")
	g.do("POST", "/v1/locks/f/release", "", map[string]any{"force": true}).want(t, 409, gateway.ProblemNotHeld)
	for _, sid := range []string{a, b, c} {
		g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
	}
	g.idle()
}

// A lock service without shared locks answers 501 to a shared acquire,
// and holds nothing; a lock's state has no readers.
func TestSharedLocksUnsupported(t *testing.T) {
	g := start(t, noPermits{memlock.New()})
	sid := g.session("", "a", "10s")
	g.acquireShared(sid, "r", "0").want(t, 501, gateway.ProblemUnsupported)
	g.acquireShared(sid, "r", "1s").want(t, 501, gateway.ProblemUnsupported)
	if st := g.do("GET", "/v1/locks/r", "", nil).want(t, 200, ""); st.body["readers"] != nil {
		t.Fatalf("state: %s; want no readers", st.raw)
	}
	g.acquire("", sid, "r", "0").want(t, 200, "")
	g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
	g.idle()
}

// A field set to null is refused with a bad-request problem naming it,
// never taken as the field left out: "shared": null is not an exclusive
// lock, "force": null not a release by the holder. The same holds for
// every field of every request body (none gives null a meaning), and
// nothing is granted or released by a refused request.
func TestNullFieldsRefused(t *testing.T) {
	g := start(t, memlock.New())
	sid := g.session("", "a", "10s")
	cases := []struct {
		path string
		body string
		name string
	}{
		{"/v1/sessions", `{"owner": "x", "ttl": null}`, "ttl"},
		{"/v1/sessions", `{"owner": null}`, "owner"},
		{"/v1/locks/data/acquire?wait=0", `{"session": "` + sid + `", "shared": null}`, "shared"},
		{"/v1/locks/data/acquire?wait=0", `{"session": null}`, "session"},
		{"/v1/semaphores/sem/acquire?wait=0", `{"session": "` + sid + `", "limit": 2, "slots": null}`, "slots"},
		{"/v1/elections/el/campaign?wait=1ms", `{"session": "` + sid + `", "value": null}`, "value"},
	}
	for _, c := range cases {
		a := g.do("POST", c.path, "", c.body).want(t, 400, gateway.ProblemBadRequest)
		if d := a.str("detail"); !strings.Contains(d, `"`+c.name+`"`) || !strings.Contains(d, "null") {
			t.Errorf("POST %s %s: detail %q; want it to name the null field %q", c.path, c.body, d, c.name)
		}
	}
	st := g.do("GET", "/v1/locks/data", "", nil).want(t, 200, "")
	if st.body["held"] != false || len(readersOf(t, st)) != 0 {
		t.Fatalf("after the refused acquires: %s; want data free", st.raw)
	}
	tok := sharedToken(t, g.acquireShared(sid, "data", "0").want(t, 200, "").body)
	g.do("POST", "/v1/locks/data/release", "", `{"session": "`+sid+`", "token": "`+strconv.FormatUint(tok, 10)+`", "force": null}`).
		want(t, 400, gateway.ProblemBadRequest)
	if rs := readersOf(t, g.do("GET", "/v1/locks/data", "", nil).want(t, 200, "")); len(rs) != 1 {
		t.Fatalf("a refused release released the shared lock: readers %v", rs)
	}
	g.do("POST", "/v1/locks/data/release", "", map[string]any{"session": sid, "token": strconv.FormatUint(tok, 10)}).want(t, 200, "")
}

// countingBackend is the memory backend counting the calls of Readers
// and List, which a lock's state may make.
type countingBackend struct {
	*memlock.Backend
	readers, lists atomic.Int64
}

func (b *countingBackend) Readers(ctx context.Context, key string) ([]driver.Holder, error) {
	b.readers.Add(1)
	return b.Backend.Readers(ctx, key)
}

func (b *countingBackend) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	b.lists.Add(1)
	return b.Backend.List(ctx, prefix)
}

// A lock's state asks the lock service for its readers only when it
// cannot know them otherwise: a key held exclusively here has none (the
// service never grants a shared lock while an exclusive one is live). A
// free key, or one held by readers, takes one Readers call: a listing is
// not taken for a key's readers (pglock lists locks without their readers
// for a role that may not read them, where Readers fails). The readers
// answered are right all the same.
func TestLockStateReadersCalls(t *testing.T) {
	b := &countingBackend{Backend: memlock.New()}
	g := start(t, b)
	a, c := g.session("", "a", "10s"), g.session("", "c", "10s")
	calls := func(what string, want string, wantReaders int64) {
		t.Helper()
		b.readers.Store(0)
		b.lists.Store(0)
		st := g.do("GET", "/v1/locks/"+what, "", nil).want(t, 200, "")
		rs := readersOf(t, st)
		got := ""
		for _, r := range rs {
			got += r["owner"].(string)
		}
		if got != want {
			t.Errorf("state of %s: %s; want readers %q", what, st.raw, want)
		}
		if n, l := b.readers.Load(), b.lists.Load(); n != wantReaders || l > 1 {
			t.Errorf("state of %s: %d Readers calls and %d List calls to the lock service; want %d and at most one", what, n, l, wantReaders)
		}
	}
	calls("free", "", 1)
	g.acquire("", a, "x", "0").want(t, 200, "")
	calls("x", "", 0)
	g.acquireShared(a, "r", "0").want(t, 200, "")
	g.acquireShared(c, "r", "0").want(t, 200, "")
	calls("r", "ac", 1)
}

// failingReleases is the memory backend whose shared grants owned by
// "bad" fail to be released (the grant stays until its lease runs out).
type failingReleases struct{ b *memlock.Backend }

func (f failingReleases) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	return f.b.Acquire(ctx, key, opts)
}

func (f failingReleases) AcquireShared(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	l, err := f.b.AcquireShared(ctx, key, opts)
	if err == nil && opts.Owner == "bad" {
		l = failingLease{l}
	}
	return l, err
}

func (f failingReleases) Readers(ctx context.Context, key string) ([]driver.Holder, error) {
	return f.b.Readers(ctx, key)
}

type failingLease struct{ driver.Lease }

func (failingLease) Release(context.Context) error { return errors.New("the release was refused") }

// A forced release of a lock's readers that fails for some of them
// answers the failure's problem with how many were released and the
// tokens released and failed, never a bare error.
func TestSharedLocksForcedReleaseFailsInPart(t *testing.T) {
	g := start(t, failingReleases{memlock.New()}, gateway.WithForceWithoutTokens())
	a, bad, c := g.session("", "a", "10s"), g.session("", "bad", "10s"), g.session("", "c", "10s")
	ta := sharedToken(t, g.acquireShared(a, "f", "0").want(t, 200, "").body)
	tbad := sharedToken(t, g.acquireShared(bad, "f", "0").want(t, 200, "").body)
	tc := sharedToken(t, g.acquireShared(c, "f", "0").want(t, 200, "").body)
	pr := g.do("POST", "/v1/locks/f/release", "", map[string]any{"force": true}).want(t, 500, gateway.ProblemInternal)
	rel, _ := pr.body["released_tokens"].([]any)
	failed, _ := pr.body["failed_tokens"].([]any)
	if len(rel) != 2 || rel[0] != strconv.FormatUint(ta, 10) || rel[1] != strconv.FormatUint(tc, 10) ||
		len(failed) != 1 || failed[0] != strconv.FormatUint(tbad, 10) ||
		!strings.Contains(pr.str("detail"), "2 of the 3 shared locks") {
		t.Fatalf("forced release failing for token %d: %s; want %d and %d released and %d failed, counted", tbad, pr.raw, ta, tc, tbad)
	}
	for sid, tok := range map[string]uint64{a: ta, bad: tbad, c: tc} {
		if e := g.events("", sid, "lock_lost"); e["reason"] != "forced_release" || sharedToken(t, e) != tok {
			t.Fatalf("event of a forced reader: %v; want token %d", e, tok)
		}
	}
	for _, sid := range []string{a, bad, c} {
		g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
	}
	g.idle()
}
