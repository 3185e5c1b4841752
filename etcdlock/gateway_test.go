package etcdlock_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/gatewaylock"
	"github.com/distlock/distlock/testserver"
)

// The gateway over etcd: its conformance, and two gateways sharing one
// etcd. (These tests live with etcdlock, whose module has etcd's client.)

const adminSecret = "admin-secret-0123456789"

// serveGateway serves a gateway over b on a free port until the test ends,
// and returns its URL.
func serveGateway(t *testing.T, b driver.Backend, opts ...gateway.Option) string {
	t.Helper()
	g, err := gateway.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// gatewayFactory returns Backends on the gateway at url.
func gatewayFactory(url string, opts ...gatewaylock.Option) distlocktest.Factory {
	return func(t *testing.T) driver.Backend {
		b, err := gatewaylock.New(url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
}

// gatewayRevoker forces the release of the gateway's grant of a key, as
// an administrator does. (Dots are escaped too, so that a key "." or ".."
// is not a path segment that the server's router cleans away.)
func gatewayRevoker(base string) func(t *testing.T, key string) {
	return func(t *testing.T, key string) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/v1/locks/"+strings.ReplaceAll(url.PathEscape(key), ".", "%2E")+"/release", strings.NewReader(`{"force":true}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+adminSecret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("forced release: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("forced release of %q: %s", key, resp.Status)
		}
	}
}

// etcdBackend opens an etcdlock Backend (one gateway's own connection) on
// the etcd at endpoint, closed with the test.
func etcdBackend(t *testing.T, endpoint string) driver.Backend {
	t.Helper()
	b, err := etcdlock.OpenURL(context.Background(), "etcd://"+strings.TrimPrefix(endpoint, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestGatewayConformance(t *testing.T) {
	e := testserver.StartEtcd(t)
	tokens, err := gateway.ParseTokens([]byte(`{"tokens":[{"name":"admin","token":"` + adminSecret + `","prefixes":[""],"admin":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	url := serveGateway(t, etcdBackend(t, e.Endpoints[0]), gateway.WithTokens(tokens))
	// What the gateway starts at its first request (its server's
	// goroutines, its backend's etcd session) runs before the suite's
	// leak checks.
	warm, err := gatewaylock.New(url, gatewaylock.WithToken(adminSecret))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := warm.Acquire(ctx, "warm-up", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("warm-up acquire: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("warm-up release: %v", err)
	}
	warm.Close()
	distlocktest.Run(t, gatewayFactory(url, gatewaylock.WithToken(adminSecret)),
		distlocktest.WithTTL(2*time.Second),
		distlocktest.WithRevoke(gatewayRevoker(url)),
		// The gateway's etcd backend starts its etcd session (one per
		// TTL, for the backend's life) in the first test that needs it.
		distlocktest.WithLeakOptions(
			goleak.IgnoreAnyFunction("github.com/distlock/distlock/etcdlock.(*session).watch"),
			goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/v3.(*lessor).keepAliveCtxCloser"),
			goleak.IgnoreAnyFunction("go.etcd.io/etcd/client/v3/concurrency.NewSession.func1"),
		),
	)
}

// Two gateways over one etcd: their clients never hold a key at once, and
// the tokens increase across both.
func TestTwoGatewaysOverOneEtcd(t *testing.T) {
	e := testserver.StartEtcd(t)
	urls := []string{serveGateway(t, etcdBackend(t, e.Endpoints[0])), serveGateway(t, etcdBackend(t, e.Endpoints[0]))}
	const key, perClient, clients = "two-gateways", 5, 4
	var (
		inside   atomic.Int32
		overlaps atomic.Int32
		mu       sync.Mutex
		tokens   []uint64
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range clients {
		b, err := gatewaylock.New(urls[i%2])
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		c, err := distlock.New(b, distlock.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		wg.Go(func() {
			for range perClient {
				l, err := c.Acquire(ctx, key)
				if err != nil {
					t.Errorf("Acquire through gateway %d: %v", i%2, err)
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // hold it a little, so that an overlap would show
				inside.Add(-1)
				if err := l.Release(ctx); err != nil && !errors.Is(err, distlock.ErrLockLost) {
					t.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Errorf("%d grants overlapped across the two gateways", n)
	}
	if len(tokens) != clients*perClient {
		t.Fatalf("%d grants, want %d", len(tokens), clients*perClient)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("grant %d: token %d after %d", i, tokens[i], tokens[i-1])
		}
	}
}
