package gatewaylock_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/gatewaylock"
	"github.com/distlock/distlock/memlock"
)

// front is a gateway served through a handler that counts the requests
// per route and can lose the answers of acquires.
type front struct {
	g   *gateway.Gateway
	srv *http.Server
	url string

	mu       sync.Mutex
	count    map[string]int                                     // "METHOD /v1/... with ids and names cut"
	dropNext int                                                // acquires whose answer is lost
	granted  []string                                           // the answers that were lost
	rewrite  func(route string, status int, body []byte) []byte // changes the answers, when set
}

func startFront(t *testing.T, b driver.Backend, addr string, opts ...gateway.Option) *front {
	t.Helper()
	g, err := gateway.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f := &front{g: g, url: "http://" + ln.Addr().String(), count: map[string]int{}}
	f.srv = &http.Server{Handler: http.HandlerFunc(f.serve)}
	go f.srv.Serve(ln)
	t.Cleanup(f.stop)
	return f
}

// stop closes the server (every connection, as a process that dies) and
// then the gateway (which releases what it holds).
func (f *front) stop() {
	f.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.g.Close(ctx)
}

func (f *front) serve(w http.ResponseWriter, r *http.Request) {
	route := r.Method + " " + r.URL.Path
	switch parts := strings.Split(r.URL.Path, "/"); {
	case len(parts) >= 4 && parts[2] == "sessions":
		parts[3] = "{id}"
		route = r.Method + " " + strings.Join(parts, "/")
	case len(parts) >= 5 && parts[2] == "locks":
		parts[3] = "{name}"
		route = r.Method + " " + strings.Join(parts, "/")
	}
	f.mu.Lock()
	f.count[route]++
	drop := route == "POST /v1/locks/{name}/acquire" && f.dropNext > 0
	if drop {
		f.dropNext--
	}
	rewrite := f.rewrite
	f.mu.Unlock()
	if !drop && rewrite != nil {
		rec := httptest.NewRecorder()
		f.g.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		body := rewrite(route, rec.Code, rec.Body.Bytes())
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.Code)
		w.Write(body)
		return
	}
	if !drop {
		f.g.ServeHTTP(w, r)
		return
	}
	// The gateway handles the acquire, and its answer is lost: the
	// connection is cut instead.
	rec := httptest.NewRecorder()
	f.g.ServeHTTP(rec, r)
	f.mu.Lock()
	f.granted = append(f.granted, rec.Body.String())
	f.mu.Unlock()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		conn.Close()
	}
}

func (f *front) counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.count {
		out[k] = v
	}
	return out
}

func newBackend(t *testing.T, url string) *gatewaylock.Backend {
	t.Helper()
	b, err := gatewaylock.New(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// A cycle is an acquire and a release: the session is created once, for
// every grant of the Backend with the same TTL and owner, and deleted by
// Close.
func TestCycleIsAcquireAndRelease(t *testing.T) {
	fb, err := filelock.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := startFront(t, fb, "127.0.0.1:0")
	b := newBackend(t, f.url)
	ctx := context.Background()
	const cycles = 20
	for range cycles {
		l, err := b.Acquire(ctx, "cycle", driver.AcquireOptions{TTL: 10 * time.Second, Owner: "me"})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	c := f.counts()
	// The keepalive loop's requests, whatever their number (none if the
	// machine never ran the loop before Close), are left out.
	delete(c, "POST /v1/sessions/{id}/keepalive")
	want := map[string]int{
		"POST /v1/sessions":             1,
		"POST /v1/locks/{name}/acquire": cycles,
		"POST /v1/locks/{name}/release": cycles,
		"DELETE /v1/sessions/{id}":      1,
	}
	for route, n := range want {
		if c[route] != n {
			t.Errorf("%s: %d requests, want %d (all: %v)", route, c[route], n, c)
		}
	}
	if len(c) != len(want) {
		t.Errorf("requests %v, want only %v", c, want)
	}
}

// A gateway that goes away is seen at once through the cut of the
// long-poll keepalive, without a renewal.
func TestGatewayGoneIsALossWithoutARenewal(t *testing.T) {
	f := startFront(t, memlock.New(), "127.0.0.1:0")
	b := newBackend(t, f.url)
	c, err := distlock.New(b, distlock.WithTTL(30*time.Second), distlock.WithRenewal(distlock.NoRenewal))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer c.Close(ctx)
	l, err := c.Acquire(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	f.stop() // the port refuses, the connections are cut
	select {
	case <-l.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the loss was not seen in 20s")
	}
	if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) || errors.Is(err, distlock.ErrDeadlinePassed) {
		t.Errorf("Err() = %v, want a loss reported before the local deadline", err)
	}
}

// A gateway restarted on the same address knows nothing of the old
// session: its locks are reported lost, and the next acquire goes to a new
// session.
func TestRestartedGatewayEndsTheSession(t *testing.T) {
	mb := memlock.New()
	f := startFront(t, mb, "127.0.0.1:0")
	b := newBackend(t, f.url)
	ctx := context.Background()
	lost := make(chan error, 1)
	l, err := b.Acquire(ctx, "restart", driver.AcquireOptions{TTL: 30 * time.Second, OnLost: func(err error) { lost <- err }})
	if err != nil {
		t.Fatal(err)
	}
	f.stop()
	startFront(t, mb, strings.TrimPrefix(f.url, "http://"))
	select {
	case err := <-lost:
		if !errors.Is(err, distlock.ErrLockLost) {
			t.Errorf("OnLost(%v), want ErrLockLost", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("OnLost not called in 20s")
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("Release of the lost grant: %v, want ErrLockLost", err)
	}
	l2, err := b.Acquire(ctx, "restart", driver.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatalf("Acquire through the restarted gateway: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// An acquire whose answer is lost is retried, and the gateway answers the
// retry with the grant it made.
func TestLostAcquireAnswerIsRelearned(t *testing.T) {
	f := startFront(t, memlock.New(), "127.0.0.1:0")
	b := newBackend(t, f.url)
	ctx := context.Background()
	f.mu.Lock()
	f.dropNext = 1
	f.mu.Unlock()
	l, err := b.Acquire(ctx, "relearn", driver.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatalf("Acquire with its first answer lost: %v", err)
	}
	defer l.Release(ctx)
	f.mu.Lock()
	granted := f.granted
	f.mu.Unlock()
	if len(granted) != 1 || !strings.Contains(granted[0], `"token":"`) {
		t.Fatalf("lost answers %q, want one grant", granted)
	}
	if want := `"token":"` + strconv.FormatUint(l.Token(), 10) + `"`; !strings.Contains(granted[0], want) {
		t.Errorf("lost answer %s, retry's token %d: want the same grant", granted[0], l.Token())
	}
}

// An acquire whose answers are all lost fails, and leaves no grant: the
// session's next keepalive answer lists the grant, which is released.
func TestLostAcquireAnswersLeaveNoGrant(t *testing.T) {
	f := startFront(t, memlock.New(), "127.0.0.1:0")
	b := newBackend(t, f.url)
	ctx := context.Background()
	f.mu.Lock()
	f.dropNext = 10
	f.mu.Unlock()
	if _, err := b.Acquire(ctx, "orphan", driver.AcquireOptions{TTL: 30 * time.Second}); !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Acquire with every answer lost: %v, want ErrUnavailable", err)
	}
	f.mu.Lock()
	f.dropNext = 0
	f.mu.Unlock()
	other := newBackend(t, f.url)
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := other.Acquire(ctx, "orphan", driver.AcquireOptions{TTL: 30 * time.Second})
		if err == nil {
			l.Release(ctx)
			break
		}
		if !errors.Is(err, distlock.ErrNotAcquired) || time.Now().After(deadline) {
			t.Fatalf("the lost grant was not released in 20s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Two Clients of one Backend that want the same key get a session each:
// the gateway would answer the second acquire in the same session with
// the first one's grant.
func TestSameKeyTwiceInOneBackend(t *testing.T) {
	f := startFront(t, memlock.New(), "127.0.0.1:0")
	b := newBackend(t, f.url)
	ctx := context.Background()
	opts := driver.AcquireOptions{TTL: 30 * time.Second, Owner: "same"}
	l, err := b.Acquire(ctx, "twice", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, "twice", opts); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("second try of a held key: %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A grant answered with no time left (the gateway rounds a lock's time
// left down to whole milliseconds) is not a grant without a time bound,
// which is what a zero TTL means to a Client.
func TestGrantWithNoTimeLeftIsNotUnbounded(t *testing.T) {
	f := startFront(t, memlock.New(), "127.0.0.1:0")
	f.mu.Lock()
	f.rewrite = func(route string, status int, body []byte) []byte {
		if route != "POST /v1/locks/{name}/acquire" || status != http.StatusOK {
			return body
		}
		var a map[string]any
		if err := json.Unmarshal(body, &a); err != nil {
			t.Errorf("grant answer %s: %v", body, err)
			return body
		}
		a["ttl_remaining_ms"] = 0 // what a lock with less than 1ms left is answered with
		out, _ := json.Marshal(a)
		return out
	}
	f.mu.Unlock()
	b := newBackend(t, f.url)
	ctx := context.Background()
	l, err := b.Acquire(ctx, "no-time-left", driver.AcquireOptions{TTL: 30 * time.Second})
	if err == nil {
		defer l.Release(ctx)
		if v := l.Validity(); v.TTL <= 0 {
			t.Fatalf("Validity() = %+v: a grant with no time left handed out as one without a time bound", v)
		}
	} else if !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("Acquire answered with no time left: %v, want ErrUnavailable", err)
	}
	// The grant the gateway made is released: another Backend gets the lock.
	f.mu.Lock()
	f.rewrite = nil
	f.mu.Unlock()
	other := newBackend(t, f.url)
	deadline := time.Now().Add(20 * time.Second)
	for {
		l2, err := other.Acquire(ctx, "no-time-left", driver.AcquireOptions{TTL: 30 * time.Second})
		if err == nil {
			l2.Release(ctx)
			break
		}
		if !errors.Is(err, distlock.ErrNotAcquired) || time.Now().After(deadline) {
			t.Fatalf("the grant answered with no time left was not released in 20s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A grant lost after the gateway answered it, but reported (lock_lost) to
// a keepalive whose answer came before the grant's, is not held: the
// event is the only word of the loss until a later answer omits the lock.
func TestGrantLostBeforeItsAnswerCame(t *testing.T) {
	f := startFront(t, memlock.New(), "127.0.0.1:0", gateway.WithForceWithoutTokens())
	f.mu.Lock()
	// Every answer goes through rewrite, from the first keepalive on.
	// lossAnswered is the keepalive count when the gateway answered a
	// keepalive with the forced release (that keepalive included): the
	// Backend's keepalive loop sends one at a time, so a keepalive counted
	// after it was sent once that answer had been taken in.
	var released atomic.Bool
	var lossAnswered atomic.Int64
	const keepalive = "POST /v1/sessions/{id}/keepalive"
	f.rewrite = func(route string, status int, body []byte) []byte {
		if route == keepalive && released.Load() && strings.Contains(string(body), `"lock_lost"`) {
			lossAnswered.CompareAndSwap(0, int64(f.counts()[keepalive]))
			return body
		}
		if route != "POST /v1/locks/{name}/acquire" || status != http.StatusOK || !strings.Contains(string(body), `"lock":"late"`) {
			return body
		}
		var g struct {
			Token string `json:"token"`
		}
		if err := json.Unmarshal(body, &g); err != nil {
			t.Errorf("grant answer %s: %v", body, err)
			return body
		}
		// An administrator forces the release: the gateway reports it to
		// the session's keepalive, whose answer the loop takes in before
		// it sends the next keepalive, all before this answer is sent.
		req := httptest.NewRequest("POST", "/v1/locks/late/release", strings.NewReader(`{"force":true,"token":"`+g.Token+`"}`))
		req.Host = "127.0.0.1"
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		released.Store(true)
		f.g.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("forced release: %d %s", rec.Code, rec.Body)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if n := lossAnswered.Load(); n != 0 && int64(f.counts()[keepalive]) > n {
				break
			}
			if time.Now().After(deadline) {
				t.Error("no keepalive after the one that carried the forced release, in 10s")
				break
			}
		}
		return body
	}
	f.mu.Unlock()
	b := newBackend(t, f.url)
	ctx := context.Background()
	// A first lock starts the session and its keepalive loop.
	first, err := b.Acquire(ctx, "first", driver.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release(ctx)
	lost := make(chan error, 1)
	l, err := b.Acquire(ctx, "late", driver.AcquireOptions{TTL: 30 * time.Second, OnLost: func(err error) { lost <- err }})
	if err != nil {
		if !errors.Is(err, distlock.ErrUnavailable) {
			t.Fatalf("Acquire of a grant lost before its answer: %v, want ErrUnavailable", err)
		}
		return
	}
	defer l.Release(ctx)
	select {
	case <-lost:
	default:
		t.Fatalf("Acquire handed out a grant that the gateway had reported lost (validity %+v)", l.Validity())
	}
}
