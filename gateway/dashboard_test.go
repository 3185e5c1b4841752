package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/testserver"
)

// chromium finds the headless browser of the dashboard tests.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testserver.Missing(t, "chromium")
	return ""
}

// page is a gateway served through a handler that lets the test see, and
// hold, the dashboard's requests.
type page struct {
	*gw
	mu        sync.Mutex
	hold      chan struct{} // while open, the page's timer refreshes wait
	connected chan struct{} // closed when the page opens the event stream
	byEvent   chan struct{} // closed when a refresh caused by an event was answered
	once      sync.Once
	evOnce    sync.Once
	gate      *writeGate    // the writes of the page's event streams pass it
	refreshes atomic.Int64  // the page's GET /v1/dashboard answered
	releases  atomic.Int64  // the page's release requests
	reloaded  chan struct{} // closed when a refresh caused by a reset was answered
	rsOnce    sync.Once
}

func startPage(t *testing.T, opts ...gateway.Option) (*page, *memlock.Backend) {
	t.Helper()
	b := memlock.New()
	return startPageOn(t, b, opts...), b
}

// startPageOn is startPage over the backend b.
func startPageOn(t *testing.T, b driver.Backend, opts ...gateway.Option) *page {
	t.Helper()
	g, err := gateway.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &page{connected: make(chan struct{}), byEvent: make(chan struct{}), gate: newWriteGate(), reloaded: make(chan struct{})}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fromPage := strings.Contains(r.UserAgent(), "Chrome")
		if fromPage && strings.HasSuffix(r.URL.Path, "/release") {
			p.releases.Add(1)
		}
		switch r.URL.Path {
		case "/v1/events":
			if r.Header.Get("Authorization") != "" || r.URL.Query().Get("last_event_id") != "" {
				p.once.Do(func() { close(p.connected) })
			}
			w = gatedWriter{ResponseWriter: w, gate: p.gate}
		case "/v1/dashboard":
			p.mu.Lock()
			hold := p.hold
			p.mu.Unlock()
			if hold != nil && r.URL.Query().Get("why") == "timer" {
				select {
				case <-hold:
				case <-time.After(10 * time.Second):
				}
			}
			if fromPage {
				defer p.refreshes.Add(1)
			}
			switch r.URL.Query().Get("why") {
			case "event":
				defer p.evOnce.Do(func() { close(p.byEvent) })
			case "reset":
				defer p.rsOnce.Do(func() { close(p.reloaded) })
			}
		}
		g.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(func() {
		p.release()
		p.gate.reopen()
		g.Close(context.Background())
		srv.Close()
		hc.CloseIdleConnections()
	})
	p.gw = &gw{t: t, g: g, url: "http://" + ln.Addr().String(), hc: hc}
	return p
}

// release lets the held refreshes go.
func (p *page) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold != nil {
		close(p.hold)
		p.hold = nil
	}
}

// row finds the row of table whose cells include all of want.
func row(rows [][]string, want ...string) []string {
next:
	for _, r := range rows {
		for _, w := range want {
			if !contains(r, w) {
				continue next
			}
		}
		return r
	}
	return nil
}

func contains(cells []string, s string) bool {
	for _, c := range cells {
		if c == s {
			return true
		}
	}
	return false
}

// The dashboard shows what the API answers: a new holder appears, a
// forced release takes the holder away and shows in the feed, a loss
// shows its reason, a stale token shows as rejected, waiters show in
// order, and names and owners are shown as text, never as markup.
func TestDashboardShowsTheAPI(t *testing.T) {
	bin := chromium(t)
	p, mem := startPage(t, gateway.WithForceWithoutTokens())
	evil := `<img src=x onerror="document.body.dataset.pwned=1">`
	evilOwner := `<b id="pwned">mallory</b>`
	alice := p.session("", evilOwner, "5m")
	a1 := p.acquire("", alice, evil, "0").want(t, 200, "")
	a2 := p.acquire("", alice, "jobs/a", "0").want(t, 200, "")

	// A waiter for jobs/a, then a forced release of alice's grant, which
	// hands it to bob.
	bob := p.session("", "bob", "5m")
	granted := make(chan answer, 1)
	go func() { granted <- p.acquire("", bob, "jobs/a", "1m") }()
	waitFor(t, 5*time.Second, "bob does not wait", func() bool {
		return bytes.Contains(p.do("GET", "/v1/dashboard", "", nil).raw, []byte(`"waiters":[{"lock":"jobs/a","owner":"bob"`))
	})
	br := startBrowser(t, bin)
	br.navigate(p.url + "/")
	br.waitTables(func(tb map[string][][]string) string {
		switch {
		case row(tb["locks"], evil, evilOwner, a1.str("token")) == nil:
			return "does not show the holder of " + evil
		case row(tb["locks"], "jobs/a", evilOwner, a2.str("token")) == nil:
			return "does not show the holder of jobs/a"
		case row(tb["locks"], "#1", "bob") == nil:
			return "does not show bob waiting for jobs/a"
		case row(tb["sessions"], "bob", "0", "1") == nil:
			return "does not show bob's session with one waiting acquire"
		}
		return ""
	})
	var markup struct {
		Injected bool
		HTML     string
	}
	if err := br.eval(`({injected: !!document.querySelector("img, #pwned") || "pwned" in document.body.dataset,
		html: document.getElementById("locks").outerHTML})`, &markup); err != nil {
		t.Fatal(err)
	}
	if markup.Injected || !strings.Contains(markup.HTML, "&lt;img src=x") {
		t.Fatalf("a lock name or owner was read as markup:\n%s", markup.HTML)
	}

	p.do("POST", "/v1/locks/jobs%2Fa/release", "", map[string]any{"force": true}).want(t, 200, "")
	b1 := (<-granted).want(t, 200, "")
	p.do("POST", "/v1/locks/jobs%2Fa/check", "", map[string]any{"token": a2.str("token")}).want(t, 200, "")
	if !mem.Revoke(evil) {
		t.Fatal("memlock did not hold the lock")
	}
	waitFor(t, 5*time.Second, "the gateway does not report the loss", func() bool {
		return bytes.Contains(p.do("GET", "/v1/dashboard", "", nil).raw, []byte(`"type":"lost"`))
	})
	br.waitTables(func(tb map[string][][]string) string {
		switch {
		case row(tb["locks"], "jobs/a", "bob", b1.str("token")) == nil:
			return "does not show bob's grant of jobs/a"
		case row(tb["locks"], "jobs/a", evilOwner, a2.str("token")) != nil:
			return "still shows the forced-released grant"
		case row(tb["locks"], evil) != nil:
			return "still shows the lost lock"
		case row(tb["ends"], "jobs/a", a2.str("token"), "forced release", "forced") == nil:
			return "does not show the forced release in the feed"
		case row(tb["ends"], evil, a1.str("token"), "lost", "lost") == nil:
			return "does not show the loss and its reason in the feed"
		case row(tb["rejections"], "jobs/a", "check", a2.str("token"), b1.str("token")) == nil:
			return "does not show the stale token rejected"
		case row(tb["contended"], "jobs/a", "1") == nil:
			return "does not show jobs/a contended"
		}
		return ""
	})
	t.Logf("screenshot of the dashboard: %s", br.screenshot("dashboard.png"))
	if c := p.g.Contention(); c.Acquires != 3 || c.Handoffs != 1 || c.WaitP95 <= 0 {
		t.Errorf("Contention %+v, want 3 acquires, 1 hand-off and a wait", c)
	}
}

// The page updates live: a holder granted while it is open appears,
// through the event stream (the page's timer refreshes are held until a
// refresh caused by an event has been answered), without a forced
// release button, which this gateway does not allow; so do the readers
// of a shared lock, a row each.
func TestDashboardLive(t *testing.T) {
	bin := chromium(t)
	p, _ := startPage(t)
	p.mu.Lock()
	p.hold = make(chan struct{})
	p.mu.Unlock()
	br := startBrowser(t, bin)
	br.navigate(p.url + "/")
	select {
	case <-p.connected:
	case <-time.After(cdpWaitTime):
		t.Fatal("the page did not open the event stream")
	}
	sid := p.session("", "carol", "5m")
	tok := p.acquire("", sid, "jobs/live", "0").want(t, 200, "").str("token")
	select {
	case <-p.byEvent:
	case <-time.After(cdpWaitTime):
		t.Fatal("the page did not refresh on the event")
	}
	br.waitTables(func(tb map[string][][]string) string {
		if row(tb["locks"], "jobs/live", "carol", tok) == nil {
			return "does not show the new holder"
		}
		return ""
	})
	// Readers show as holders do, each with its token and the count.
	r1, r2 := p.session("", "rita", "5m"), p.session("", "rory", "5m")
	t1 := p.acquireShared(r1, "jobs/read", "0").want(t, 200, "").str("token")
	t2 := p.acquireShared(r2, "jobs/read", "0").want(t, 200, "").str("token")
	br.waitTables(func(tb map[string][][]string) string {
		if row(tb["locks"], "jobs/read", "shared (2 readers)", "rita", t1) == nil ||
			row(tb["locks"], "jobs/read", "shared (2 readers)", "rory", t2) == nil {
			return "does not show both readers"
		}
		return ""
	})
	var status struct{ Text, Class string }
	if err := br.eval(`({text: document.getElementById("status").textContent, class: document.getElementById("status").className})`, &status); err != nil ||
		status.Text != "live" || status.Class != "live" {
		t.Errorf("the page's status is %+v (%v), want live", status, err)
	}
	// Without tokens, and without WithForceWithoutTokens, nobody may
	// force a release: the page offers none, and says so; it has no
	// token field.
	var page struct {
		Buttons int
		Force   string
		Auth    string
	}
	if err := br.eval(`({buttons: document.querySelectorAll("#locks tbody button").length,
		force: document.getElementById("force").textContent, auth: getComputedStyle(document.getElementById("auth")).display})`, &page); err != nil ||
		page.Buttons != 0 || !strings.HasPrefix(page.Force, "Forced release: off") || page.Auth != "none" {
		t.Errorf("the page has %d forced release buttons, says %q, and its token field shows as %q (%v); want none, off, none",
			page.Buttons, page.Force, page.Auth, err)
	}
	p.release()
}

// With tokens the page's data needs one, which the page takes in a field
// and keeps in sessionStorage; the page itself is served to anyone.
func TestDashboardTokens(t *testing.T) {
	bin := chromium(t)
	toks, err := gateway.ParseTokens([]byte(`{"tokens":[{"name":"ops","token":"0123456789abcdef-ops","prefixes":[""],"admin":true},
		{"name":"ci","token":"0123456789abcdef-ci","prefixes":["ci/"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := startPage(t, gateway.WithTokens(toks))
	page := p.do("GET", "/", "", nil).want(t, 200, "")
	if ct := page.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") ||
		!strings.Contains(page.header.Get("Content-Security-Policy"), "script-src 'sha256-") {
		t.Errorf("page headers %v", page.header)
	}
	if !bytes.Contains(page.raw, []byte("sessionStorage")) {
		t.Error("the page does not keep its token in sessionStorage")
	}
	p.do("GET", "/v1/dashboard", "", nil).want(t, 401, gateway.ProblemUnauthorized)
	ci := p.session("0123456789abcdef-ci", "ci-job", "10s")
	p.acquire("0123456789abcdef-ci", ci, "ci/x", "0").want(t, 200, "")
	ops := p.session("0123456789abcdef-ops", "operator", "10s")
	p.acquire("0123456789abcdef-ops", ops, "prod/db", "0").want(t, 200, "")
	d := p.do("GET", "/v1/dashboard", "0123456789abcdef-ci", nil).want(t, 200, "")
	if bytes.Contains(d.raw, []byte("prod/db")) || bytes.Contains(d.raw, []byte("operator")) || d.body["admin"] != false {
		t.Errorf("the ci token sees others' locks or sessions: %s", d.raw)
	}
	d = p.do("GET", "/v1/dashboard", "0123456789abcdef-ops", nil).want(t, 200, "")
	if !bytes.Contains(d.raw, []byte("prod/db")) || !bytes.Contains(d.raw, []byte("ci/x")) || d.body["admin"] != true {
		t.Errorf("the admin token does not see every lock: %s", d.raw)
	}
	if bytes.Contains(d.raw, []byte(ci)) || bytes.Contains(d.raw, []byte(ops)) {
		t.Errorf("the dashboard shows session ids: %s", d.raw)
	}
	// Without a token in its tab, the page shows no lock and asks for one.
	br := startBrowser(t, bin)
	br.navigate(p.url + "/")
	br.until("the page without a token does not ask for one", `document.getElementById("status").textContent.includes("answered 401") &&
		document.getElementById("status").textContent.includes("enter a token above")`)
	var text string
	if err := br.eval(`document.body.innerText`, &text); err != nil || strings.Contains(text, "prod/db") || strings.Contains(text, "ci/x") {
		t.Errorf("the page without a token shows (%v):\n%s", err, text)
	}
}

// GET /v1/dashboard answers waiters in the order they began, a refused
// try as contention, and a renewal once the lock was renewed.
func TestDashboardAnswers(t *testing.T) {
	p, _ := startPage(t, gateway.WithForceWithoutTokens())
	holder := p.session("", "holder", "600ms")
	p.acquire("", holder, "q", "0").want(t, 200, "")
	// A keepalive in progress keeps the session alive while the Client
	// renews the lock (every 200ms).
	kept := make(chan answer, 1)
	go func() { kept <- p.do("POST", "/v1/sessions/"+holder+"/keepalive?wait=3s", "", nil) }()

	try := p.session("", "try", "10s")
	p.acquire("", try, "q", "0").want(t, 409, gateway.ProblemNotAcquired)
	var done []chan answer
	for _, owner := range []string{"w1", "w2", "w3"} {
		sid := p.session("", owner, "10s")
		ch := make(chan answer, 1)
		done = append(done, ch)
		go func() { ch <- p.acquire("", sid, "q", "10s") }()
		n := len(done)
		waitFor(t, 5*time.Second, owner+" does not wait", func() bool {
			return bytes.Count(p.do("GET", "/v1/dashboard", "", nil).raw, []byte(`"wait_ms"`)) == n
		})
	}
	var d struct {
		Locks []struct {
			Lock    string     `json:"lock"`
			Renewed *time.Time `json:"renewed"`
		} `json:"locks"`
		Waiters []struct {
			Lock, Owner string
		} `json:"waiters"`
		Contention struct {
			Acquires  int `json:"acquires"`
			Contended []struct {
				Lock  string `json:"lock"`
				Count int    `json:"count"`
			} `json:"contended"`
		} `json:"contention"`
	}
	waitFor(t, 5*time.Second, "no renewal shown", func() bool {
		a := p.do("GET", "/v1/dashboard", "", nil).want(t, 200, "")
		if err := json.Unmarshal(a.raw, &d); err != nil {
			t.Fatal(err)
		}
		return len(d.Locks) == 1 && d.Locks[0].Renewed != nil
	})
	var owners []string
	for _, w := range d.Waiters {
		owners = append(owners, w.Owner)
	}
	if strings.Join(owners, ",") != "w1,w2,w3" {
		t.Errorf("waiters %q, want w1,w2,w3 in order", owners)
	}
	if c := d.Contention; c.Acquires != 1 || len(c.Contended) != 1 || c.Contended[0].Lock != "q" || c.Contended[0].Count != 4 {
		t.Errorf("contention %+v, want 1 acquire and q found held 4 times", c)
	}
	p.do("DELETE", "/v1/sessions/"+holder, "", nil).want(t, 204, "")
	<-kept
	// The waiters get the lock in turn, each taken away by force.
	for _, ch := range done {
		(<-ch).want(t, 200, "")
		p.do("POST", "/v1/locks/q/release", "", map[string]any{"force": true}).want(t, 200, "")
	}
}

// The wait p95 counts the acquires still waiting, with how long they have
// waited so far: a lock held for long shows while its waiters wait, not
// only once they are granted it. (It counted the waits of grants alone:
// two waiters at many seconds beside one wait that ended at once showed
// as a p95 of that one.)
func TestDashboardWaitP95CountsWaitsInProgress(t *testing.T) {
	p, _ := startPage(t)
	quick := p.session("", "quick", "10s")
	p.acquire("", quick, "free", "1s").want(t, 200, "") // a wait that ends at once
	holder := p.session("", "holder", "1m")
	p.acquire("", holder, "busy", "0").want(t, 200, "")
	// Each waiter's session ends once its acquire is answered, which
	// hands the lock to the other.
	done := make(chan answer, 2)
	for _, owner := range []string{"w1", "w2"} {
		sid := p.session("", owner, "1m")
		go func() {
			a := p.acquire("", sid, "busy", "1m")
			p.do("DELETE", "/v1/sessions/"+sid, "", nil)
			done <- a
		}()
	}
	const long = 300 * time.Millisecond
	waitFor(t, 10*time.Second, "the wait p95 does not count the two waits in progress", func() bool {
		c := p.g.Contention()
		return c.Waiting == 2 && c.WaitP95 >= long
	})
	var d struct {
		Contention struct {
			WaitP95MS float64 `json:"wait_p95_ms"`
			Waiting   int     `json:"waiting"`
		} `json:"contention"`
	}
	if err := json.Unmarshal(p.do("GET", "/v1/dashboard", "", nil).want(t, 200, "").raw, &d); err != nil ||
		d.Contention.Waiting != 2 || d.Contention.WaitP95MS < float64(long.Milliseconds()) {
		t.Errorf("GET /v1/dashboard: contention %+v (%v); want 2 waiting and a p95 of %v or more", d.Contention, err, long)
	}
	p.do("DELETE", "/v1/sessions/"+holder, "", nil).want(t, 204, "")
	for range 2 {
		(<-done).want(t, 200, "")
	}
}

// dashboardLocks reads the locks of GET /v1/dashboard.
func (g *gw) dashboardLocks() []map[string]any {
	g.t.Helper()
	a := g.do("GET", "/v1/dashboard", "", nil).want(g.t, 200, "")
	ls, _ := a.body["locks"].([]any)
	out := []map[string]any{}
	for _, l := range ls {
		out = append(out, l.(map[string]any))
	}
	return out
}

// The dashboard's data shows a lock's readers as it shows a holder, one
// entry per shared lock with its owner, token and time left, marked
// shared with the count of the name's readers, after the name's other
// entries; each change comes with an event of the stream the page
// refreshes on, and the next answer shows it. (A name held by readers
// alone showed as free.)
func TestDashboardShowsReaders(t *testing.T) {
	g := start(t, memlock.New())
	st := g.stream("", "", "")
	a, b, w := g.session("", "ann", "10s"), g.session("", "bob", "10s"), g.session("", "wes", "10s")
	ta := g.acquireShared(a, "data", "0").want(t, 200, "").str("token")
	tb := g.acquireShared(b, "data", "0").want(t, 200, "").str("token")
	g.acquire("", w, "other", "0").want(t, 200, "")
	for range 3 {
		if e := st.next(); e.typ != "granted" {
			t.Fatalf("event %+v; want granted", e)
		}
	}
	ls := g.dashboardLocks()
	type shown struct {
		lock, owner, token string
		shared             bool
		readers            float64
	}
	got := func(ls []map[string]any) []shown {
		var out []shown
		for _, l := range ls {
			if left, _ := l["ttl_remaining_ms"].(float64); left <= 0 || l["since"] == nil || l["lease_remaining_ms"] == nil {
				t.Errorf("entry %v: want its time left, since and lease, as a holder's", l)
			}
			sh, _ := l["shared"].(bool)
			n, _ := l["readers"].(float64)
			out = append(out, shown{l["lock"].(string), l["owner"].(string), l["token"].(string), sh, n})
		}
		return out
	}
	want := []shown{{"data", "ann", ta, true, 2}, {"data", "bob", tb, true, 2}, {"other", "wes", "", false, 0}}
	g2 := got(ls)
	if len(g2) == 3 {
		want[2].token = g2[2].token
	}
	if !slices.Equal(g2, want) {
		t.Fatalf("dashboard locks %+v; want %+v", g2, want)
	}
	g.do("POST", "/v1/locks/data/release", "", map[string]any{"session": a, "token": ta}).want(t, 200, "")
	if e := st.next(); e.typ != "released" || e.data["shared"] != true || e.data["token"] != ta {
		t.Fatalf("event %+v; want the release of %s", e, ta)
	}
	if g3 := got(g.dashboardLocks()); len(g3) != 2 || g3[0] != (shown{"data", "bob", tb, true, 1}) {
		t.Fatalf("dashboard locks after a reader's release: %+v; want bob's alone, 1 reader", g3)
	}
	for _, sid := range []string{a, b, w} {
		g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
	}
	g.idle()
}
