package gateway_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

// keepAlive keeps the session sid alive with long-polling keepalives, as
// a client does, until the test ends.
func (p *page) keepAlive(t *testing.T, sid string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			req, err := http.NewRequestWithContext(ctx, "POST", p.url+"/v1/sessions/"+sid+"/keepalive?wait=2s", nil)
			if err != nil {
				return
			}
			if resp, err := p.hc.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// queue has the session sid wait for the lock name (as long as the
// gateway lets it) until it is granted or the test ends, without failing
// the test: its answer is not the point.
func (p *page) queue(t *testing.T, sid, name string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, err := http.NewRequestWithContext(ctx, "POST", p.url+"/v1/locks/"+esc(name)+"/acquire?wait=10m",
			strings.NewReader(`{"session":`+strconv.Quote(sid)+`}`))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		if resp, err := p.hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// The dashboard as a person sees it, in a window 1400 pixels wide and in
// one 420 pixels wide (a phone), with a DOM check of each thing it must
// show, and a screenshot of each width (in $DISTLOCK_SCREENSHOTS, or the
// test's directory): the lock service it serves, without its password;
// the waiters under the lock they wait for, with their number on the
// lock's row; the renewal of a lease as it is; a wait p95 that counts the
// waits in progress; no token field on a gateway without tokens; the
// forced release as the gateway allows it; locks at risk and expiring in
// colour, with words; a filter by prefix and sorting; and, on the narrow
// screen, no sideways scrolling and names that break between their
// parts, not inside a word.
func TestDashboardAtTwoWidths(t *testing.T) {
	bin := chromium(t)
	mem := memlock.New()
	faulty := distlocktest.NewFaulty(mem)
	const secret = "s3cretpw"
	p := startPageOn(t, faulty, gateway.WithForceWithoutTokens(), gateway.WithMaxWait(10*time.Minute),
		gateway.WithServiceURL("redis://alice:"+secret+"@redis.example:6379/0"))
	// Leases and sessions of 30s: the at-risk and expiring states below
	// come some 20s in (two thirds of the TTL) and last some 10s, which
	// the test reads at once when it sees them, then ends.
	const ttl = "30s"
	long := "jobs/nightly-backup/eu-west-1/database-primary"

	// A wait that ended at once; earlier grants, so that the order of
	// the tokens is not the order of the names.
	quick := p.session("", "quick", ttl)
	p.acquire("", quick, "jobs/quick", "1s").want(t, 200, "")
	for _, name := range []string{"jobs/cleanup", "jobs/cleanup", "reports/daily"} {
		tok := p.acquire("", quick, name, "0").want(t, 200, "").str("token")
		p.do("POST", "/v1/locks/"+esc(name)+"/release", "", map[string]any{"session": quick, "token": tok}).want(t, 200, "")
	}
	p.do("DELETE", "/v1/sessions/"+quick, "", nil).want(t, 204, "")
	// A lock held, renewed, with two acquires waiting for it, in order.
	holder := p.session("", "backup-runner@host-a", ttl)
	p.keepAlive(t, holder)
	heldTok := p.acquire("", holder, long, "0").want(t, 200, "").str("token")
	for i, owner := range []string{"bob", "carol"} {
		p.queue(t, p.session("", owner, "5m"), long)
		waitFor(t, cdpWaitTime, owner+" does not wait", func() bool {
			return strings.Count(string(p.do("GET", "/v1/dashboard", "", nil).raw), `"wait_ms"`) == i+1
		})
	}
	// A lock whose renewals fail: at risk.
	risky := p.session("", "report-builder", ttl)
	p.keepAlive(t, risky)
	p.acquire("", risky, "reports/daily", "0").want(t, 200, "")
	faulty.Partition("reports/daily")
	// A lock whose client stopped keeping its session alive: expiring.
	idle := p.session("", "cron@host-b", ttl)
	p.acquire("", idle, "jobs/cleanup", "0").want(t, 200, "")

	br := startBrowser(t, bin)
	br.viewport(1400, 900)
	br.navigate(p.url + "/")
	row := func(lock string) string {
		return `[...document.querySelectorAll("#locks tbody tr.held")].find(r => r.dataset.lock === ` + jsString(lock) + `)`
	}
	text := func(expr string) string {
		t.Helper()
		var s string
		if err := br.eval(expr, &s); err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return s
	}
	// Some 20s: longer than until waits.
	waitFor(t, time.Minute, "the page does not show the lock at risk and the expiring one", func() bool {
		var ok bool
		err := br.eval(row("reports/daily")+`?.classList.contains("at-risk") && `+row("jobs/cleanup")+`?.classList.contains("expiring")`, &ok)
		return err == nil && ok
	})

	// At risk and expiring: in colour, and said; read at once, in one
	// go, since they last some 10s. Each held lock has its forced
	// release button, which the flag allows.
	var states struct {
		States  []string
		Buttons int
	}
	if err := br.eval(`(() => { const out = [];
		for (const name of [`+jsString("reports/daily")+`, `+jsString("jobs/cleanup")+`, `+jsString(long)+`]) {
			const r = [...document.querySelectorAll("#locks tbody tr.held")].find(r => r.dataset.lock === name);
			out.push(name + ": " + r.cells[1].textContent + " " + getComputedStyle(r.cells[0]).backgroundColor + ", " +
				r.cells[6].textContent.replace(/[0-9.]+ (ms|s) ago/, "ago"));
		}
		return {states: out, buttons: document.querySelectorAll("#locks tr.held button").length}; })()`, &states); err != nil {
		t.Fatal(err)
	}
	// The lock at risk was never renewed (its renewals fail), and says so;
	// the others were.
	want := []string{"reports/daily: at risk rgb(253, 228, 228), not renewed yet",
		"jobs/cleanup: expiring rgb(255, 243, 205), renewed ago", long + ": ok rgba(0, 0, 0, 0), renewed ago"}
	if strings.Join(states.States, "\n") != strings.Join(want, "\n") || states.Buttons != 3 {
		t.Errorf("states and colours:\n%s\nwant\n%s\nand %d forced release buttons, want one per held lock (3)",
			strings.Join(states.States, "\n"), strings.Join(want, "\n"), states.Buttons)
	}
	t.Logf("screenshot at 1400 px, with a lock at risk and one expiring: %s", br.screenshot("dashboard-1400-states.png"))
	// Ended now, so that nothing below depends on how long they last; the
	// two locks taken again by a session that outlives the test, in the
	// other order, so that the order of the tokens is not that of the
	// names.
	faulty.Heal()
	p.do("DELETE", "/v1/sessions/"+idle, "", nil).want(t, 204, "")
	p.do("DELETE", "/v1/sessions/"+risky, "", nil).want(t, 204, "")
	steady := p.session("", "steady", "5m")
	p.acquire("", steady, "reports/daily", "0").want(t, 200, "")
	p.acquire("", steady, "jobs/cleanup", "0").want(t, 200, "")
	br.until("the page does not show the locks taken again", row("jobs/cleanup")+`?.cells[2].textContent === "steady" && `+
		row("reports/daily")+`?.cells[2].textContent === "steady"`)

	// The lock service, without its password.
	if s := text(`document.getElementById("service").textContent`); !strings.Contains(s, "redis") ||
		!strings.Contains(s, "redis.example:6379/0") || strings.Contains(s, secret) || strings.Contains(s, "alice") {
		t.Errorf("the page names the service %q; want redis at redis.example:6379/0, without user or password", s)
	}
	// The waiters under their lock, in order, counted on its row.
	var w struct {
		Count   string
		Waiters []string
		Tables  []string
	}
	if err := br.eval(`(() => { const r = `+row(long)+`; const out = []; let n = r.nextElementSibling;
		for (; n && n.classList.contains("waiter"); n = n.nextElementSibling) out.push(n.dataset.lock + " " + n.cells[0].textContent + " " + n.cells[1].textContent);
		return {count: r.cells[7].textContent, waiters: out, tables: [...document.querySelectorAll("table")].map(t => t.id)}; })()`, &w); err != nil {
		t.Fatal(err)
	}
	if want := []string{long + " #1 bob", long + " #2 carol"}; w.Count != "2" || strings.Join(w.Waiters, ",") != strings.Join(want, ",") {
		t.Errorf("the held row counts %q waiters, followed by %q; want 2, then %q", w.Count, w.Waiters, want)
	}
	for _, id := range w.Tables {
		if id == "waiters" {
			t.Error("the page still has a separate table of waiters")
		}
	}
	// What keeps a lease: renewed, with when; never "never" beside a time left.
	br.until("the held lock does not show its renewal", row(long)+`.cells[6].textContent.startsWith("renewed ")`)
	if s := text(`document.body.innerText`); strings.Contains(s, "never") {
		t.Errorf("the page says never:\n%s", s)
	}
	// The wait p95 counts the two acquires still waiting, some 16s now.
	if p95, note := text(`document.getElementById("wait-p95").textContent`), text(`document.getElementById("wait-note").textContent`); note != "with 2 waiting now" ||
		!strings.HasSuffix(p95, " s") || seconds(p95) < 10 {
		t.Errorf("wait p95 %q %q; want 10 s or more, with 2 waiting now", p95, note)
	}
	// No token field without tokens; the forced release as allowed.
	if s := text(`(() => { const a = document.getElementById("auth"); return a.hidden + " " + getComputedStyle(a).display; })()`); s != "true none" {
		t.Errorf("the token field: hidden, display = %s; want true none on a gateway without tokens", s)
	}
	if s := text(`document.getElementById("force").textContent`); !strings.Contains(s, "allowed to every local user") {
		t.Errorf("the page says %q of forced releases; want allowed to every local user", s)
	}
	// The filter by prefix, and sorting.
	locksShown := func() string {
		t.Helper()
		return text(`[...document.querySelectorAll("#locks tbody tr.held")].map(r => r.dataset.lock).join(",")`)
	}
	br.typeInto("the filter", `document.getElementById("filter")`, "jobs/n")
	br.until("the filter does not leave the one lock under jobs/n", `[...document.querySelectorAll("#locks tbody tr[data-lock]")].every(r => r.dataset.lock.startsWith("jobs/n"))`)
	if s := locksShown(); s != long {
		t.Errorf("filtered by jobs/n, the page shows %q", s)
	}
	br.eval(`(() => { const f = document.getElementById("filter"); f.value = ""; f.dispatchEvent(new Event("input")); })()`, nil)
	if s, want := locksShown(), "jobs/cleanup,"+long+",reports/daily"; s != want {
		t.Errorf("by name, the page shows %q, want %q", s, want)
	}
	header := func(key string) string { return `document.querySelector("#locks th[data-sort=` + key + `] button")` }
	br.click("the token heading", header("token"))
	byToken := text(`[...document.querySelectorAll("#locks tbody tr.held")].map(r => r.cells[3].textContent).join(",")`)
	br.click("the token heading again", header("token"))
	byTokenDesc := text(`[...document.querySelectorAll("#locks tbody tr.held")].map(r => r.cells[3].textContent).join(",")`)
	toks := strings.Split(byToken, ",")
	ascending := len(toks) == 3
	for i := 1; i < len(toks); i++ {
		a, _ := strconv.ParseUint(toks[i-1], 10, 64)
		b, _ := strconv.ParseUint(toks[i], 10, 64)
		ascending = ascending && a < b
	}
	if !ascending || byTokenDesc != reverse(byToken) || !strings.Contains(byToken, heldTok) ||
		text(`document.querySelector("#locks th[data-sort=token]").getAttribute("aria-sort")`) != "descending" {
		t.Errorf("sorted by token %q, then %q; want 3 ascending, then descending", byToken, byTokenDesc)
	}
	br.click("the lock heading", header("lock"))
	t.Logf("screenshot at 1400 px: %s", br.screenshot("dashboard-1400.png"))

	// A phone: no sideways scrolling, rows as labelled cards, names broken
	// between their parts.
	br.viewport(420, 900)
	br.until("the page is wider than the screen", `innerWidth === 420 && document.documentElement.scrollWidth <= innerWidth`)
	if s := text(`getComputedStyle(document.querySelector("#locks thead")).display + " " + getComputedStyle(` + row(long) + `.cells[2], "::before").content`); s != `none "holder: "` {
		t.Errorf("on a narrow screen the table's heading and a cell's label are %s; want none, and the label", s)
	}
	var broken []string
	if err := br.eval(midWordBreaks, &broken); err != nil || len(broken) != 0 {
		t.Errorf("names broken inside a word (%v): %q", err, broken)
	}
	var lines int
	if err := br.eval(`(() => { const c = `+row(long)+`.cells[0]; return Math.round(c.getBoundingClientRect().height / parseFloat(getComputedStyle(c).lineHeight)); })()`, &lines); err != nil || lines < 2 {
		t.Errorf("the long name takes %d lines (%v): the test shows no break", lines, err)
	}
	t.Logf("screenshot at 420 px: %s", br.screenshot("dashboard-420.png"))
}

// midWordBreaks lists the lock names of the page that break onto a new
// line inside a word: not after a separator ("/", ".", "-", "_", ":"),
// in a part that would fit the cell's width.
const midWordBreaks = `(() => {
	const bad = [];
	for (const td of document.querySelectorAll("td.mono")) {
		const chars = [];
		const walk = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
		for (let n = walk.nextNode(); n; n = walk.nextNode()) {
			for (let i = 0; i < n.data.length; i++) {
				const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
				const rect = r.getClientRects()[0];
				if (rect) chars.push({c: n.data[i], top: rect.top, w: rect.width});
			}
		}
		const sep = (c) => "/.-_:".includes(c), room = td.clientWidth;
		for (let i = 1; i < chars.length; i++) {
			if (chars[i].top <= chars[i - 1].top + 1 || sep(chars[i - 1].c)) continue;
			let a = i - 1, b = i, w = 0;
			while (a > 0 && !sep(chars[a - 1].c)) a--;
			while (b < chars.length - 1 && !sep(chars[b].c)) b++;
			for (let k = a; k <= b; k++) w += chars[k].w;
			if (w <= room) bad.push(td.textContent + " before " + i);
		}
	}
	return bad;
})()`

// seconds reads a duration as the page shows it ("16.2 s").
func seconds(s string) float64 {
	f, _ := strconv.ParseFloat(strings.TrimSuffix(s, " s"), 64)
	return f
}

// reverse reverses a comma-separated list.
func reverse(list string) string {
	parts := strings.Split(list, ",")
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, ",")
}

// The dashboard says what keeps each lock, as is true of the lock service:
// a lease renewed by the gateway (with when), a session with the service
// kept alive, or, where the lock has no lease (file://, PostgreSQL
// session locks), what it lasts as long as. It never says "never" beside
// a time left, as it did of a lock that has no lease to renew.
func TestDashboardSaysWhatKeepsALock(t *testing.T) {
	bin := chromium(t)
	files, err := filelock.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { files.Close() })
	for _, c := range []struct {
		name string
		b    driver.Backend
		opts []gateway.Option
		kind string // as the page names the service
		want string // the start of what it says of the lease
	}{
		{"file", files, nil, "filelock", "none: held while the gateway keeps its lock file open"},
		{"session", memlock.New(), []gateway.Option{gateway.WithServiceURL("etcd://etcd.example:2379")}, "etcd", "session, "},
		{"lease", memlock.New(), []gateway.Option{gateway.WithServiceURL("redis://redis.example:6379")}, "redis", "not renewed yet"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startPageOn(t, c.b, c.opts...)
			sid := p.session("", "holder", "5m")
			p.acquire("", sid, "jobs/a", "0").want(t, 200, "")
			t.Cleanup(func() { p.do("DELETE", "/v1/sessions/"+sid, "", nil) })
			br := startBrowser(t, bin)
			br.navigate(p.url + "/")
			row := `[...document.querySelectorAll("#locks tbody tr.held")].find(r => r.dataset.lock === "jobs/a")`
			br.until("the page does not show jobs/a", `!!`+row)
			var got struct{ Kind, Lease, Page string }
			if err := br.eval(`({kind: document.getElementById("service-kind").textContent, lease: `+row+`.cells[6].textContent,
				page: document.body.innerText})`, &got); err != nil {
				t.Fatal(err)
			}
			if got.Kind != c.kind || !strings.HasPrefix(got.Lease, c.want) || strings.Contains(got.Page, "never") {
				t.Errorf("the page names the service %q and says of the lease %q; want %q and %q..., and no \"never\" in:\n%s",
					got.Kind, got.Lease, c.kind, c.want, got.Page)
			}
		})
	}
}
