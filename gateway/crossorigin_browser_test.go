package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

// arrival is a request that reached the gateway, and its answer.
type arrival struct {
	method, path, contentType, origin, fetchSite, body string
	status                                             int
}

// recorder serves a gateway and records the requests of the browser (its
// User-Agent names Chrome) with their answers.
type recorder struct {
	g  http.Handler
	mu sync.Mutex
	in []arrival
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.Contains(r.UserAgent(), "Chrome") {
		rc.g.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, gateway.MaxBody))
	r.Body = io.NopCloser(bytes.NewReader(body))
	sw := &statusRecorder{ResponseWriter: w}
	rc.g.ServeHTTP(sw, r)
	rc.mu.Lock()
	rc.in = append(rc.in, arrival{method: r.Method, path: r.URL.EscapedPath(), contentType: r.Header.Get("Content-Type"),
		origin: r.Header.Get("Origin"), fetchSite: r.Header.Get("Sec-Fetch-Site"), body: string(body), status: sw.status})
	rc.mu.Unlock()
}

func (rc *recorder) arrivals() []arrival {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]arrival(nil), rc.in...)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// serveOn serves h on a new loopback port until the test ends, and
// returns its URL.
func serveOn(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// attackPage posts to the gateway at gw every way a page of another
// origin can without the gateway's consent: fetch with mode no-cors and
// a Blob body (no Content-Type), navigator.sendBeacon with a Blob, a
// form posted as text/plain (whose field makes the body JSON), and a CORS
// fetch of JSON (which needs a preflight). Each goes to the forced
// release of the lock name and to the creation of a session.
func attackPage(gw, name string) string {
	release := gw + "/v1/locks/" + esc(name) + "/release"
	sessions := gw + "/v1/sessions"
	// A text/plain form sends NAME=VALUE: the name opens a JSON string
	// that the value closes, the "=" inside it.
	form := func(id, action, field string) string {
		return `<iframe name="` + id + `"></iframe><form id="` + id + `" method="POST" enctype="text/plain" target="` + id +
			`" action="` + action + `"><input name='` + field + `' value='"}'></form>`
	}
	return `<!DOCTYPE html><html><body>` + form("f1", release, `{"force":true,"session":"`) +
		form("f2", sessions, `{"ttl":"5m","owner":"`) + `<script>
"use strict";
(async () => {
  const targets = [[` + jsString(release) + `, '{"force":true}'], [` + jsString(sessions) + `, '{"owner":"page","ttl":"5m"}']];
  const beacons = [];
  for (const [u, body] of targets) {
    try { await fetch(u, {method: "POST", mode: "no-cors", body: new Blob([body])}); } catch (e) {}
    beacons.push(navigator.sendBeacon(u, new Blob([body])));
    try { await fetch(u, {method: "POST", headers: {"Content-Type": "application/json"}, body: body}); } catch (e) {}
  }
  document.getElementById("f1").submit();
  document.getElementById("f2").submit();
  document.body.dataset.beacons = JSON.stringify(beacons);
  document.body.dataset.done = "1";
})();
</script></body></html>`
}

// A gateway without tokens trusts whoever reaches it on the loopback
// interface, but not a web page of another origin that the local user
// opens: every request such a page can send without the gateway's
// consent reaches the gateway (shown by what arrives: the bodies of the
// no-cors fetch and the beacon, without a Content-Type) and is refused,
// so that the lock stays held and no session is created.
func TestCrossOriginPageCannotChangeLocks(t *testing.T) {
	bin := chromium(t)
	b := memlock.New()
	g, err := gateway.New(b, gateway.WithForceWithoutTokens()) // the page tries what an operator may
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	rec := &recorder{g: g}
	gw := &gw{t: t, g: g, url: serveOn(t, rec), hc: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}
	t.Cleanup(gw.hc.CloseIdleConnections)
	const name = "jobs/held"
	sid := gw.session("", "holder", "5m")
	tok := gw.acquire("", sid, name, "0").want(t, 200, "").str("token")

	page := attackPage(gw.url, name)
	evil := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, page)
	}))
	br := startBrowser(t, bin)
	br.navigate(evil + "/")
	br.until("the page did not send its requests", `document.body.dataset.done === "1"`)
	var beacons []bool
	if err := br.eval(`JSON.parse(document.body.dataset.beacons)`, &beacons); err != nil || len(beacons) != 2 || !beacons[0] || !beacons[1] {
		t.Fatalf("the beacons were not queued: %v (%v)", beacons, err)
	}
	// Per target: the no-cors fetch, the beacon, the form, and the CORS
	// fetch's preflight (OPTIONS: the POST itself is never sent).
	const want = 8
	var in []arrival
	waitFor(t, cdpWaitTime, "the page's requests did not all arrive", func() bool { in = rec.arrivals(); return len(in) >= want })
	blobs := 0
	for _, a := range in {
		t.Logf("%s %s Content-Type %q Origin %q Sec-Fetch-Site %q: %d %q", a.method, a.path, a.contentType, a.origin, a.fetchSite, a.status, a.body)
		if a.method == "POST" && a.contentType == "" && strings.HasPrefix(a.body, "{") {
			blobs++
		}
		if a.method == "POST" && a.status/100 == 2 {
			t.Errorf("the gateway answered %d to the page's %s %s (Content-Type %q)", a.status, a.method, a.path, a.contentType)
		}
	}
	if len(in) != want || blobs != 4 {
		t.Errorf("%d requests arrived, %d of them JSON without a Content-Type; want %d and 4", len(in), blobs, want)
	}
	held := gw.do("GET", "/v1/locks/"+esc(name), "", nil).want(t, 200, "")
	holder, _ := held.body["holder"].(map[string]any)
	if held.body["held"] != true || fmt.Sprint(holder["token"]) != tok {
		t.Errorf("after the page's requests the lock is %s, want still held with token %s", held.raw, tok)
	}
	if s := g.Stats(); s.Sessions != 1 {
		t.Errorf("after the page's requests the gateway has %d sessions, want the holder's alone", s.Sessions)
	}
}
