package gatewaylock_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/gatewaylock"
)

// serve runs a gateway over b on a loopback port until the test ends and
// returns its URL.
func serve(t *testing.T, b driver.Backend, opts ...gateway.Option) string {
	return serveB(t, b, opts...)
}

// serveB is serve for tests and benchmarks.
func serveB(t testing.TB, b driver.Backend, opts ...gateway.Option) string {
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

// factory returns Backends on the gateway at url.
func factory(url string, opts ...gatewaylock.Option) distlocktest.Factory {
	return func(t *testing.T) driver.Backend {
		b, err := gatewaylock.New(url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
}

const adminSecret = "admin-secret-0123456789"

// revoker forces the release of the gateway's grant of a key, as an
// administrator does.
func revoker(url string) func(t *testing.T, key string) {
	return func(t *testing.T, key string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/v1/locks/"+gatewaylock.Escape(key)+"/release", strings.NewReader(`{"force":true}`))
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

func TestConformanceOverFile(t *testing.T) {
	fb, err := filelock.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := gateway.ParseTokens([]byte(`{"tokens":[{"name":"admin","token":"` + adminSecret + `","prefixes":[""],"admin":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, fb, gateway.WithTokens(tokens))
	warmUp(t, url)
	distlocktest.Run(t, factory(url, gatewaylock.WithToken(adminSecret)),
		distlocktest.WithRevoke(revoker(url)),
		distlocktest.WithUnreachable(factory("http://127.0.0.1:1")),
	)
}

// warmUp takes and gives back a lock through the gateway at url, so that
// what the gateway starts at its first request (its server's goroutines,
// its backend's connections) runs before the suite's leak checks, which
// would count it against the first test.
func warmUp(t *testing.T, url string) {
	t.Helper()
	b, err := gatewaylock.New(url, gatewaylock.WithToken(adminSecret))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := b.Acquire(ctx, "warm-up", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("warm-up acquire: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("warm-up release: %v", err)
	}
}

func TestRefusedTokenIsNotRetried(t *testing.T) {
	tokens, err := gateway.ParseTokens([]byte(`{"tokens":[{"name":"jobs","token":"` + adminSecret + `","prefixes":["jobs/"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	fb, err := filelock.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, fb, gateway.WithTokens(tokens))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for name, tc := range map[string]struct{ token, key string }{
		"no token":     {"", "jobs/a"},
		"wrong token":  {"x" + adminSecret, "jobs/a"},
		"wrong prefix": {adminSecret, "other/a"},
	} {
		b, err := gatewaylock.New(url, gatewaylock.WithToken(tc.token))
		if err != nil {
			t.Fatal(err)
		}
		c, err := distlock.New(b)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Acquire(ctx, tc.key)
		if !errors.Is(err, gatewaylock.ErrRefused) || ctx.Err() != nil {
			t.Errorf("%s: %v, want ErrRefused at once", name, err)
		}
		c.Close(ctx)
		b.Close()
	}
}
