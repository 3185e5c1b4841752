package gatewaylock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/gatewaylock"
	"github.com/distlock/distlock/memlock"
)

// serveMem runs a gateway over memlock, with the admin token, and returns
// its URL.
func serveMem(t *testing.T) string {
	t.Helper()
	mb := memlock.New()
	t.Cleanup(func() { mb.Close() })
	tokens, err := gateway.ParseTokens([]byte(`{"tokens":[{"name":"admin","token":"` + adminSecret + `","prefixes":[""],"admin":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, mb, gateway.WithTokens(tokens))
	warmUp(t, url)
	return url
}

func TestHolderOverMemlock(t *testing.T) {
	url := serveMem(t)
	distlocktest.RunHolder(t, factory(url, gatewaylock.WithToken(adminSecret)), distlocktest.WithRevoke(revoker(url)))
}

func TestElectionOverMemlock(t *testing.T) {
	url := serveMem(t)
	distlocktest.RunElection(t, factory(url, gatewaylock.WithToken(adminSecret)), distlocktest.WithRevoke(revoker(url)))
}

// httpCampaigner takes part in an election through the gateway's HTTP
// routes, as a program in another language does.
type httpCampaigner struct {
	t       *testing.T
	url     string
	session string
}

func newHTTPCampaigner(t *testing.T, url string) *httpCampaigner {
	t.Helper()
	h := &httpCampaigner{t: t, url: url}
	var s struct{ ID string }
	if status := h.post("/v1/sessions", map[string]string{"owner": "http", "ttl": "10s"}, &s); status != 201 && status != 200 {
		t.Fatalf("POST /v1/sessions: %d", status)
	}
	h.session = s.ID
	t.Cleanup(func() { h.do("DELETE", "/v1/sessions/"+h.session, nil, nil) })
	return h
}

func (h *httpCampaigner) do(method, path string, in, out any) int {
	h.t.Helper()
	var body strings.Reader
	if in != nil {
		data, _ := json.Marshal(in)
		body = *strings.NewReader(string(data))
	}
	req, err := http.NewRequest(method, h.url+path, &body)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if out != nil && resp.StatusCode/100 == 2 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			h.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

func (h *httpCampaigner) post(path string, in, out any) int { return h.do("POST", path, in, out) }

type termAnswer struct {
	Token string `json:"token"`
	Value string `json:"value"`
}

// campaign campaigns for value, waiting at most wait, and returns the
// status and the term.
func (h *httpCampaigner) campaign(name, value string, wait time.Duration) (int, termAnswer) {
	var a termAnswer
	status := h.post("/v1/elections/"+gatewaylock.Escape(name)+"/campaign?wait="+wait.String(),
		map[string]string{"session": h.session, "value": value}, &a)
	return status, a
}

func (h *httpCampaigner) leader(name string) (int, termAnswer) {
	var a termAnswer
	return h.do("GET", "/v1/elections/"+gatewaylock.Escape(name)+"/leader", nil, &a), a
}

// A candidate through gatewaylock and a campaigner through the gateway's
// HTTP routes share one election: one leader at a time, each reads the
// other's value as the leader's, the HTTP campaigner's observe stream
// sees the Go candidate's term, and the Go candidate's Observe the HTTP
// one's, and each is elected once the other resigns.
func TestElectionSharedWithHTTPCampaigner(t *testing.T) {
	url := serveMem(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := gatewaylock.New(url, gatewaylock.WithToken(adminSecret))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	name := "shared-" + strings.ReplaceAll(t.Name(), "/", "-")
	e, err := election.New(c, name)
	if err != nil {
		t.Fatal(err)
	}
	h := newHTTPCampaigner(t, url)
	octx, stopObserve := context.WithCancel(ctx)
	defer stopObserve()
	seen := e.Observe(octx)
	next := func(want election.Leader) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case l := <-seen:
				if l == want {
					return
				}
			case <-timeout:
				t.Fatalf("Observe did not send %+v", want)
			}
		}
	}
	next(election.Leader{})

	// The Go candidate leads: the HTTP campaigner is not elected, and
	// reads the Go candidate's value.
	term, err := e.Campaign(ctx, "go")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	next(election.Leader{Value: "go", Token: term.Token()})
	if status, a := h.campaign(name, "http", 100*time.Millisecond); status != 409 {
		t.Errorf("HTTP campaign while the Go candidate leads: %d %+v, want 409", status, a)
	}
	if status, a := h.leader(name); status != 200 || a.Value != "go" || a.Token != fmt.Sprint(term.Token()) {
		t.Errorf("HTTP leader = %d %+v; want go, term %d", status, a, term.Token())
	}
	if err := term.Proclaim(ctx, "go, proclaimed"); err != nil {
		t.Fatalf("Proclaim: %v", err)
	}
	next(election.Leader{Value: "go, proclaimed", Token: term.Token()})
	if status, a := h.leader(name); status != 200 || a.Value != "go, proclaimed" {
		t.Errorf("HTTP leader after Proclaim = %d %+v", status, a)
	}

	// The HTTP campaigner waits, and is elected when the Go candidate
	// resigns, with a later term.
	type campaignResult struct {
		status int
		a      termAnswer
	}
	elected := make(chan campaignResult, 1)
	go func() {
		status, a := h.campaign(name, "http", 30*time.Second)
		elected <- campaignResult{status, a}
	}()
	if err := term.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	r := <-elected
	if r.status != 200 {
		t.Fatalf("HTTP campaign after the resignation: %d", r.status)
	}
	if tok := parseToken(t, r.a.Token); tok <= term.Token() {
		t.Errorf("HTTP term %d after Go term %d", tok, term.Token())
	}
	l, err := e.Leader(ctx)
	if err != nil || l.Value != "http" || fmt.Sprint(l.Token) != r.a.Token {
		t.Errorf("Leader() = %+v, %v; want the HTTP campaigner's term %s", l, err, r.a.Token)
	}
	next(election.Leader{Value: "http", Token: l.Token})

	// The Go candidate waits in turn, and is elected once the HTTP
	// campaigner resigns.
	cctx, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	if term, err := e.Campaign(cctx, "go again"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("Campaign while the HTTP campaigner leads = %v, %v; want ErrNotAcquired", term, err)
	}
	stop()
	again := make(chan *election.Term, 1)
	go func() {
		term, err := e.Campaign(ctx, "go again")
		if err != nil {
			t.Errorf("Campaign: %v", err)
		}
		again <- term
	}()
	if status := h.post("/v1/elections/"+gatewaylock.Escape(name)+"/resign",
		map[string]string{"session": h.session, "token": r.a.Token}, nil); status != 200 {
		t.Fatalf("HTTP resign: %d", status)
	}
	term = <-again
	if term == nil {
		t.FailNow()
	}
	if term.Token() <= parseToken(t, r.a.Token) {
		t.Errorf("Go term %d after HTTP term %s", term.Token(), r.a.Token)
	}
	if status, a := h.leader(name); status != 200 || a.Value != "go again" || a.Token != fmt.Sprint(term.Token()) {
		t.Errorf("HTTP leader = %d %+v; want go again, term %d", status, a, term.Token())
	}
	if err := term.Resign(ctx); err != nil {
		t.Errorf("Resign: %v", err)
	}
}

func parseToken(t *testing.T, s string) uint64 {
	t.Helper()
	tok, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("token %q: %v", s, err)
	}
	return tok
}

// The watch of an election's key follows the lock service through the
// gateway's observe stream: a leader elected by another client of the
// service, not through the gateway, wakes it, and Holder reads it.
func TestWatchElectionSeesOtherClientsOfTheService(t *testing.T) {
	mb := memlock.New()
	defer mb.Close()
	url := serve(t, mb)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := gatewaylock.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	key := election.KeyPrefix + "elsewhere"
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	woken, err := b.WatchHolder(wctx, key)
	if err != nil {
		t.Fatalf("WatchHolder: %v", err)
	}
	l, err := mb.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "direct"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("WatchHolder not woken by a grant made at the service")
	}
	if h, held, err := b.Holder(ctx, key); err != nil || !held || h.Token != l.Token() || h.Owner != "direct" {
		t.Errorf("Holder = %+v, %v, %v; want token %d, owner direct", h, held, err, l.Token())
	}
	stop()
	for range woken { // closed when its context ends
	}
}

// slowGrants is memlock whose grants take delay, as a lock service far
// away or a loaded machine does; an acquire whose context ends first is
// not acquired.
type slowGrants struct {
	*memlock.Backend
	delay time.Duration
}

func (b slowGrants) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	t := time.NewTimer(b.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, driver.Canceled(ctx)
	}
	return b.Backend.Acquire(ctx, key, opts)
}

// A one-try campaign (distlock.WithWait(false)) of an election with no
// leader is elected however long the lock service takes to grant it, and
// refused ErrNotAcquired while another leads. (It was sent to the gateway
// as a wait of a millisecond, which a slower grant outlasted: refused
// "another leader" while nobody led.)
func TestOneTryCampaignOverASlowService(t *testing.T) {
	mb := memlock.New()
	t.Cleanup(func() { mb.Close() })
	url := serve(t, slowGrants{Backend: mb, delay: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tryer := func(value string) *election.Election {
		b := newBackend(t, url)
		c, err := distlock.New(b, distlock.WithTTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		e, err := election.New(c, "svc", election.WithLockOptions(distlock.WithWait(false)))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a, b := tryer("a"), tryer("b")
	ta, err := a.Campaign(ctx, "a")
	if err != nil {
		t.Fatalf("one try with no leader: %v", err)
	}
	if term, err := b.Campaign(ctx, "b"); term != nil || !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("one try while another leads = %v, %v; want no term and ErrNotAcquired", term, err)
	}
	if err := ta.Resign(ctx); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	tb, err := b.Campaign(ctx, "b")
	if err != nil {
		t.Fatalf("one try after the leader resigned: %v", err)
	}
	if tb.Token() <= ta.Token() {
		t.Errorf("term %d after term %d", tb.Token(), ta.Token())
	}
	if err := tb.Resign(ctx); err != nil {
		t.Errorf("Resign: %v", err)
	}
}

// The partition suite through a gateway over memlock. A member's locks
// (its membership and up to every unit of the group, 64 here) share one
// gateway session, so the gateway allows twice as many as the suite's
// units: at its default (DefaultMaxLocks, 64) the member's 65th lock is
// refused with 429 for as long as it holds the others. The TTL is longer
// than the other suites': a member's first reconcile sends 64 acquires
// at once, each on an HTTP connection of its own, and under the race
// detector the member's keepalive came later than a TTL of 1s allows.
func TestPartitionOverMemlock(t *testing.T) {
	mb := memlock.New()
	t.Cleanup(func() { mb.Close() })
	tokens, err := gateway.ParseTokens([]byte(`{"tokens":[{"name":"admin","token":"` + adminSecret + `","prefixes":[""],"admin":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, mb, gateway.WithTokens(tokens), gateway.WithMaxLocks(128))
	warmUp(t, url)
	distlocktest.RunPartition(t, factory(url, gatewaylock.WithToken(adminSecret)),
		distlocktest.WithTTL(2*time.Second), distlocktest.WithRevoke(revoker(url)))
}
