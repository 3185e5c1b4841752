package gateway_test

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/internal/visible"
)

// The forced release as a person does it: a token typed into the page,
// the button clicked, the confirmation accepted. The API then answers the
// lock free, and the page shows it gone and the forced release and a loss
// with their reasons in the feed. A token without the admin scope gets no
// button, and the gateway refuses it the release. The lock's name is
// markup, which the page shows as text.
func TestDashboardForcedReleaseClicked(t *testing.T) {
	bin := chromium(t)
	const opsSecret, viewerSecret = "0123456789abcdef-ops", "0123456789abcdef-viewer"
	toks, err := gateway.ParseTokens([]byte(`{"tokens":[{"name":"ops","token":"` + opsSecret + `","prefixes":[""],"admin":true},
		{"name":"viewer","token":"` + viewerSecret + `","prefixes":[""]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	p, mem := startPage(t, gateway.WithTokens(toks))
	evil := `<img src=x onerror="document.body.dataset.pwned=1">`
	evilOwner := `<b id="pwned">mallory</b>`
	sid := p.session(viewerSecret, evilOwner, "5m") // outlives a slow run: no keepalive here
	tok := p.acquire(viewerSecret, sid, evil, "0").want(t, 200, "").str("token")
	lostTok := p.acquire(viewerSecret, sid, "jobs/lost", "0").want(t, 200, "").str("token")

	br := startBrowser(t, bin)
	dialogs := br.on("Page.javascriptDialogOpening")
	br.navigate(p.url + "/")
	br.until("the page does not ask for a token", `document.getElementById("status").textContent.includes("enter a token above")`)
	evilRow := `[...document.querySelectorAll("#locks tbody tr")].find(r => r.dataset.lock === ` + jsString(evil) + `)`
	useToken := func(secret string) {
		t.Helper()
		br.typeInto("the token field", `document.getElementById("token")`, secret)
		br.click("the token's button", `document.querySelector("#auth button")`)
	}

	// Without the admin scope: the lock is shown, with no button.
	useToken(viewerSecret)
	br.until("the lock is not shown to the viewer", `!!`+evilRow)
	var viewer struct {
		Buttons int
		Force   string
	}
	if err := br.eval(`({buttons: document.querySelectorAll("#locks tbody button").length, force: document.getElementById("force").textContent})`,
		&viewer); err != nil || viewer.Buttons != 0 || viewer.Force != "Forced release: admin tokens only." {
		t.Errorf("the viewer's page has %d forced release buttons and says %q (%v), want none, and admin tokens only", viewer.Buttons, viewer.Force, err)
	}
	p.do("POST", "/v1/locks/"+esc(evil)+"/release", viewerSecret, map[string]any{"force": true, "token": tok}).
		want(t, 403, gateway.ProblemForbidden)

	// With it: a button in the lock's row, which asks first; dismissed,
	// nothing is sent.
	useToken(opsSecret)
	br.until("the admin's page has no forced release button", `!!`+evilRow+`?.querySelector("button")`)
	dismissed := br.press("the forced release button", evilRow+`.querySelector("button")`)
	select {
	case <-dialogs:
	case <-dismissed:
		t.Fatal("the forced release did not ask for confirmation")
	case <-time.After(cdpWaitTime):
		t.Fatal("no confirmation dialog")
	}
	br.call(br.session, "Page.handleJavaScriptDialog", map[string]any{"accept": false}, nil)
	br.wait("the dismissed click's release", dismissed, nil)
	// A release would have been sent before the page's next refreshes.
	n := p.refreshes.Load()
	waitFor(t, cdpWaitTime, "the page does not refresh", func() bool { return p.refreshes.Load() >= n+2 })
	if n := p.releases.Load(); n != 0 || p.do("GET", "/v1/locks/"+esc(evil), opsSecret, nil).want(t, 200, "").body["held"] != true {
		t.Fatalf("a dismissed confirmation sent %d release requests, or the lock is free", n)
	}
	released := br.press("the forced release button", evilRow+`.querySelector("button")`)
	select {
	case m := <-dialogs:
		var d struct {
			Type, Message string
		}
		if err := json.Unmarshal(m.Params, &d); err != nil {
			t.Fatal(err)
		}
		if d.Type != "confirm" || !strings.Contains(d.Message, strconv.Quote(evil)) ||
			!strings.Contains(d.Message, tok) {
			t.Errorf("the confirmation %+v does not name the lock %q and its token %s", d, evil, tok)
		}
	case <-released:
		t.Fatal("the forced release did not ask for confirmation")
	case <-time.After(cdpWaitTime):
		t.Fatal("no confirmation dialog")
	}
	br.call(br.session, "Page.handleJavaScriptDialog", map[string]any{"accept": true}, nil)
	br.wait("the click's release", released, nil)

	waitFor(t, cdpWaitTime, "the clicked forced release did not free the lock", func() bool {
		return p.do("GET", "/v1/locks/"+esc(evil), opsSecret, nil).want(t, 200, "").body["held"] == false
	})
	if n := p.releases.Load(); n != 1 {
		t.Errorf("the page sent %d release requests, want 1", n)
	}
	if !mem.Revoke("jobs/lost") {
		t.Fatal("memlock did not hold jobs/lost")
	}
	br.until("the page still shows the released lock or the lost one", `!`+evilRow+
		` && ![...document.querySelectorAll("#locks tbody tr")].some(r => r.dataset.lock === "jobs/lost")`)
	br.until("the page does not show both ends in its feed", `document.querySelectorAll("#ends tbody tr.lost, #ends tbody tr.forced").length === 2`)

	// What the page shows is what the API answers.
	var d struct {
		Locks []struct{ Lock string }
		Ends  []struct {
			Type, Lock, Token, Reason string
		}
	}
	if err := json.Unmarshal(p.do("GET", "/v1/dashboard", opsSecret, nil).want(t, 200, "").raw, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Locks) != 0 || len(d.Ends) != 2 {
		t.Fatalf("the API answers locks %+v and ends %+v, want none held and two ends", d.Locks, d.Ends)
	}
	tb := br.tables()
	for _, e := range d.Ends {
		what := "lost"
		if e.Type == "released" {
			what = "forced release"
		}
		if r := row(tb["ends"], e.Lock, e.Token, what, e.Reason); r == nil {
			t.Errorf("the page's feed %q lacks the API's %+v", tb["ends"], e)
		}
	}
	if r := row(tb["ends"], evil, evilOwner, tok, "forced release", "forced"); r == nil {
		t.Errorf("the forced release is not in the page's feed: %q", tb["ends"])
	}
	if r := row(tb["ends"], "jobs/lost", lostTok, "lost", "lost"); r == nil {
		t.Errorf("the loss and its reason are not in the page's feed: %q", tb["ends"])
	}
	var injected bool
	if err := br.eval(`!!document.querySelector("img, #pwned") || "pwned" in document.body.dataset`, &injected); err != nil || injected {
		t.Errorf("a lock name or owner was read as markup (%v)", err)
	}
	t.Logf("screenshot of the dashboard after the forced release: %s", br.screenshot("dashboard-forced.png"))
	p.do("DELETE", "/v1/sessions/"+sid, viewerSecret, nil).want(t, 204, "")
}

// A click on a lock's forced release button whose press and release come
// on either side of a render of the page (it renders every second and on
// every event) still asks, and releases that lock: the page keeps the
// rows of the locks still held, since the browser sends no click for a
// button replaced between the press and the release.
func TestDashboardClickSpanningARender(t *testing.T) {
	bin := chromium(t)
	p, _ := startPage(t, gateway.WithForceWithoutTokens())
	sid := p.session("", "ops", "5m")
	tok := p.acquire("", sid, "jobs/a", "0").want(t, 200, "").str("token")
	br := startBrowser(t, bin)
	dialogs := br.on("Page.javascriptDialogOpening")
	br.navigate(p.url + "/")
	rowOf := func(name string) string {
		return `[...document.querySelectorAll("#locks tbody tr")].find(r => r.dataset.lock === ` + jsString(name) + `)`
	}
	br.until("the page shows no forced release button for jobs/a", `!!`+rowOf("jobs/a")+`?.querySelector("button")`)
	at := br.down("the forced release button of jobs/a", rowOf("jobs/a")+`.querySelector("button")`)
	// A lock taken now is an event, on which the page renders; it comes
	// after jobs/a, whose row stays where it is.
	p.acquire("", sid, "jobs/b", "0").want(t, 200, "")
	br.until("the page does not show jobs/b", `!!`+rowOf("jobs/b"))
	released := br.up(at)
	select {
	case m := <-dialogs:
		var d struct{ Message string }
		if err := json.Unmarshal(m.Params, &d); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(d.Message, strconv.Quote("jobs/a")) || !strings.Contains(d.Message, tok) {
			t.Errorf("the confirmation %q does not name jobs/a and its token %s", d.Message, tok)
		}
	case <-released:
		t.Fatal("a click across a render of the page was lost: no confirmation")
	case <-time.After(cdpWaitTime):
		t.Fatal("no confirmation dialog")
	}
	br.call(br.session, "Page.handleJavaScriptDialog", map[string]any{"accept": true}, nil)
	br.wait("the click's release", released, nil)
	waitFor(t, cdpWaitTime, "the clicked forced release did not free jobs/a", func() bool {
		return p.do("GET", "/v1/locks/"+esc("jobs/a"), "", nil).want(t, 200, "").body["held"] == false
	})
	if p.do("GET", "/v1/locks/"+esc("jobs/b"), "", nil).want(t, 200, "").body["held"] != true {
		t.Error("jobs/b was released too")
	}
	p.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
}

// A page whose event stream falls behind, so that the gateway drops
// events before sending them, reads its state anew on the reset event,
// and shows the lock whose grant it was never sent.
func TestDashboardReloadsOnReset(t *testing.T) {
	bin := chromium(t)
	p, _ := startPage(t)
	br := startBrowser(t, bin)
	br.navigate(p.url + "/")
	br.until("the page does not follow the events", `document.getElementById("status").textContent === "live"`)
	waitFor(t, cdpWaitTime, "the page's event stream wrote nothing", func() bool { n, _ := p.gate.stats(); return n > 0 })
	p.gate.shut()
	sid := p.session("", "busy", "5m")
	p.acquire("", sid, "jobs/first", "0").want(t, 200, "")
	select {
	case <-p.gate.waiting:
	case <-time.After(cdpWaitTime):
		t.Fatal("the page's stream did not try to write the first event")
	}
	gap := p.acquire("", sid, "jobs/gap", "0").want(t, 200, "").str("token")
	for i := range keptEvents/2 + 8 {
		name := fmt.Sprintf("jobs/%d", i)
		tok := p.acquire("", sid, name, "0").want(t, 200, "").str("token")
		p.do("POST", "/v1/locks/"+esc(name)+"/release", "", map[string]any{"session": sid, "token": tok}).want(t, 200, "")
	}
	p.gate.reopen()
	select {
	case <-p.reloaded:
	case <-time.After(cdpWaitTime):
		t.Fatal("the page did not read its state anew on the reset")
	}
	br.until("the page does not show the lock granted in the gap",
		`[...document.querySelectorAll("#locks tbody tr")].some(r => r.dataset.lock === "jobs/gap" && r.textContent.includes(`+jsString(gap)+`))`)
	p.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
}

// Names and owners with characters that do not print are shown as
// `distlock status` shows them, quoted with escapes (visible.Quote): a
// bidirectional control such as U+202E, which shows the rest of a name
// backwards, an isolate, or a zero-width joiner would make one name look
// like another. So in the tables and in the forced release's
// confirmation; and the page's rule is Go's, for every character both
// know.
func TestDashboardEscapesInvisibleCharacters(t *testing.T) {
	bin := chromium(t)
	p, _ := startPage(t, gateway.WithForceWithoutTokens())
	names := []string{"jobs/\u202egnp.exe", "jobs/a\u200db", "jobs/\u2066iso\u2069", "jobs/\u061cmark\u200f", "\"quoted", "ключ/😀", "jobs/tab\u00a0nbsp"}
	const owner = "eve\u202e\u200b"
	sid := p.session("", owner, "5m")
	for _, n := range names {
		p.acquire("", sid, n, "0").want(t, 200, "")
	}
	br := startBrowser(t, bin)
	dialogs := br.on("Page.javascriptDialogOpening")
	br.navigate(p.url + "/")
	tb := br.waitTables(func(tb map[string][][]string) string {
		for _, n := range names {
			if row(tb["locks"], visible.Quote(n), visible.Quote(owner)) == nil {
				return "does not show " + visible.Quote(n) + " held by " + visible.Quote(owner)
			}
		}
		if row(tb["sessions"], visible.Quote(owner)) == nil {
			return "does not show the session of " + visible.Quote(owner)
		}
		return ""
	})
	for id, rows := range tb {
		for _, r := range rows {
			for _, c := range r {
				if strings.ContainsFunc(c, visible.Hidden) {
					t.Errorf("table %s shows %+q", id, c)
				}
			}
		}
	}

	// The confirmation names the lock and its holder, quoted with escapes.
	bidi := `[...document.querySelectorAll("#locks tbody tr")].find(r => r.dataset.lock === ` + jsString(names[0]) + `)`
	dismissed := br.press("the forced release button", bidi+`.querySelector("button")`)
	select {
	case m := <-dialogs:
		var d struct{ Message string }
		if err := json.Unmarshal(m.Params, &d); err != nil {
			t.Fatal(err)
		}
		if strings.ContainsFunc(d.Message, visible.Hidden) || !strings.Contains(d.Message, strconv.Quote(names[0])) ||
			!strings.Contains(d.Message, strconv.Quote(owner)) {
			t.Errorf("the confirmation %+q does not name the lock and its holder quoted with escapes", d.Message)
		}
	case <-dismissed:
		t.Fatal("the forced release did not ask for confirmation")
	case <-time.After(cdpWaitTime):
		t.Fatal("no confirmation dialog")
	}
	br.call(br.session, "Page.handleJavaScriptDialog", map[string]any{"accept": false}, nil)
	br.wait("the dismissed click's release", dismissed, nil)

	// The page's rule, over every code point (as ranges of hidden ones).
	var ranges [][2]rune
	if err := br.eval(`(() => { const out = []; let start = -1;
		for (let c = 0; c <= 0x10FFFF; c++) {
			const h = hiddenChar.test(String.fromCodePoint(c));
			if (h && start < 0) start = c;
			if (!h && start >= 0) { out.push([start, c - 1]); start = -1; }
		}
		if (start >= 0) out.push([start, 0x10FFFF]);
		return out; })()`, &ranges); err != nil {
		t.Fatal(err)
	}
	pageHidden := func(r rune) bool {
		i := sort.Search(len(ranges), func(i int) bool { return ranges[i][1] >= r })
		return i < len(ranges) && ranges[i][0] <= r
	}
	// Characters that Go's Unicode tables do not know (assigned by a later
	// version, which the browser may know) are left out.
	known := []*unicode.RangeTable{unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs}
	differ := 0
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if unicode.IsOneOf(known, r) && pageHidden(r) != visible.Hidden(r) {
			if differ++; differ <= 10 {
				t.Errorf("%U: hidden by the page %v, by visible.Hidden %v", r, pageHidden(r), visible.Hidden(r))
			}
		}
	}
	if differ > 10 {
		t.Errorf("and %d more", differ-10)
	}
	for _, r := range []rune{0x202e, 0x2066, 0x200d, 0x200b, 0xfeff, 0x7f, 0x85, 0xfffd} {
		if !pageHidden(r) {
			t.Errorf("the page does not escape %U", r)
		}
	}
}
