package gateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/memlock"
)

// writeGate holds the writes of the event streams served through it while
// shut, as a subscriber that reads slowly (or a full TCP window) does.
type writeGate struct {
	mu      sync.Mutex
	open    chan struct{} // closed while the gate is open
	writes  int
	largest int           // bytes of the largest write
	waiting chan struct{} // gets a value when a write waits at the shut gate
}

func newWriteGate() *writeGate {
	open := make(chan struct{})
	close(open)
	return &writeGate{open: open, waiting: make(chan struct{}, 1)}
}

func (wg *writeGate) shut() {
	wg.mu.Lock()
	defer wg.mu.Unlock()
	wg.open = make(chan struct{})
}

func (wg *writeGate) reopen() {
	wg.mu.Lock()
	defer wg.mu.Unlock()
	select {
	case <-wg.open:
	default:
		close(wg.open)
	}
}

func (wg *writeGate) pass(n int) {
	wg.mu.Lock()
	wg.writes++
	wg.largest = max(wg.largest, n)
	open := wg.open
	wg.mu.Unlock()
	select {
	case <-open:
		return
	default:
	}
	select {
	case wg.waiting <- struct{}{}:
	default:
	}
	<-open
}

func (wg *writeGate) stats() (writes, largest int) {
	wg.mu.Lock()
	defer wg.mu.Unlock()
	return wg.writes, wg.largest
}

// gatedWriter is a ResponseWriter whose writes pass a writeGate; Unwrap
// lets http.ResponseController reach the connection's flush and deadline.
type gatedWriter struct {
	http.ResponseWriter
	gate *writeGate
}

func (w gatedWriter) Write(p []byte) (int, error) {
	w.gate.pass(len(p))
	return w.ResponseWriter.Write(p)
}

func (w gatedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// startGated serves a gateway whose event streams write through gate.
func startGated(t *testing.T, gate *writeGate, opts ...gateway.Option) *gw {
	t.Helper()
	g, err := gateway.New(memlock.New(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/events" {
			w = gatedWriter{ResponseWriter: w, gate: gate}
		}
		g.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(func() {
		gate.reopen()
		g.Close(context.Background())
		srv.Close()
		hc.CloseIdleConnections()
	})
	return &gw{t: t, g: g, url: "http://" + ln.Addr().String(), hc: hc}
}

// keptEvents is how many events a gateway keeps for its event streams.
const keptEvents = 1024

// seqOf is the sequence number of an event id (epoch.seq).
func seqOf(t *testing.T, id string) uint64 {
	t.Helper()
	_, n, _ := strings.Cut(id, ".")
	seq, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		t.Fatalf("event id %q: %v", id, err)
	}
	return seq
}

// A live stream that falls more than the kept events behind gets a reset
// event, then the events still kept, and goes on; the gateway is not held
// up by it meanwhile, and writes it in bounded pieces.
func TestSlowEventStreamGetsReset(t *testing.T) {
	gate := newWriteGate()
	g := startGated(t, gate)
	st := g.stream("", "", "")
	waitFor(t, 10*time.Second, "the stream wrote nothing", func() bool { n, _ := gate.stats(); return n > 0 })
	gate.shut()
	sid := g.session("", "slow", "5m")
	first := g.acquire("", sid, "jobs/first", "0").want(t, 200, "").str("token")
	select {
	case <-gate.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not try to write the first event")
	}
	// While the stream's write waits, the gateway goes on: more events
	// than it keeps.
	const cycles = keptEvents/2 + 8
	for i := range cycles {
		name := fmt.Sprintf("jobs/%d", i)
		tok := g.acquire("", sid, name, "0").want(t, 200, "").str("token")
		g.do("POST", "/v1/locks/"+esc(name)+"/release", "", map[string]any{"session": sid, "token": tok}).want(t, 200, "")
	}
	gate.reopen()

	if e := st.next(); e.typ != "granted" || e.data["lock"] != "jobs/first" || e.data["token"] != first {
		t.Fatalf("first event %+v, want the grant of jobs/first", e)
	}
	reset := st.next()
	if reset.typ != "reset" || !strings.Contains(fmt.Sprint(reset.data["reason"]), "fell behind") || reset.id != "" {
		t.Fatalf("after falling behind: %+v, want a reset event", reset)
	}
	last := uint64(1 + 2*cycles)
	next := st.next()
	from := seqOf(t, next.id)
	if from != last-keptEvents+1 {
		t.Errorf("the first event after the reset is %d, want the oldest kept, %d", from, last-keptEvents+1)
	}
	for seq := from; seq < last; seq++ {
		e := st.next()
		if e.typ == "reset" || seqOf(t, e.id) != seq+1 {
			t.Fatalf("after event %d: %+v, want event %d", seq, e, seq+1)
		}
	}
	// The stream goes on live.
	tok := g.acquire("", sid, "jobs/after", "0").want(t, 200, "").str("token")
	if e := st.next(); e.typ != "granted" || e.data["token"] != tok || seqOf(t, e.id) != last+1 {
		t.Errorf("the live event after catching up: %+v", e)
	}
	// Each write is at most a bounded batch of events (64 KiB and one
	// event), not all the events the stream was behind by.
	if _, largest := gate.stats(); largest > 64<<10+4<<10 {
		t.Errorf("the stream wrote %d bytes at once", largest)
	}
	g.do("DELETE", "/v1/sessions/"+sid, "", nil).want(t, 204, "")
	g.idle()
}
