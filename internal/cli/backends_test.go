//go:build linux

package cli_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/cli"
	"github.com/distlock/distlock/memlock"
)

// closingBackend is a backend with a Close method, as the network backends
// have.
type closingBackend struct {
	*memlock.Backend
	closed *atomic.Bool
}

func (b closingBackend) Close() error { b.closed.Store(true); return nil }

// DISTLOCK_BACKEND selects the backend; AsOpener adapts an OpenURL function
// and the backend is closed after use.
func TestBackendFromEnvironment(t *testing.T) {
	t.Parallel()
	var closed atomic.Bool
	var gotURL string
	open := cli.AsOpener(func(_ context.Context, raw string) (closingBackend, error) {
		gotURL = raw
		return closingBackend{memlock.New(), &closed}, nil
	})
	getenv := func(k string) string {
		if k == "DISTLOCK_BACKEND" {
			return "test://somewhere"
		}
		return ""
	}
	var stderr strings.Builder
	code := cli.Run(context.Background(), []string{"run", "k", "--", "true"},
		cli.WithOpener("test", open), cli.WithGetenv(getenv), cli.WithStdio(strings.NewReader(""), io.Discard, &stderr))
	if code != 0 || gotURL != "test://somewhere" || !closed.Load() {
		t.Errorf("exit %d (stderr %q), opened %q, closed %v; want 0, test://somewhere, true", code, stderr.String(), gotURL, closed.Load())
	}
}

// A backend whose error quotes its URL does not leak the password, and a
// failure to open the backend exits 69.
func TestOpenErrorsAreScrubbed(t *testing.T) {
	t.Parallel()
	const secret = "pa55/w:rd"
	open := func(_ context.Context, raw string) (distlock.Backend, io.Closer, error) {
		return nil, nil, fmt.Errorf("%w: cannot reach %s", distlock.ErrUnavailable, raw)
	}
	for _, raw := range []string{
		"test://user:" + strings.ReplaceAll(secret, "/", "%2F") + "@host:1",
		"test://host:1/?password=" + strings.ReplaceAll(secret, "/", "%2F"),
	} {
		var stderr strings.Builder
		code := cli.Run(context.Background(), []string{"--backend", raw, "status"},
			cli.WithOpener("test", open), cli.WithStdio(strings.NewReader(""), io.Discard, &stderr))
		if code != cli.ExitUnavailable || !strings.Contains(stderr.String(), "cannot reach") {
			t.Errorf("%s: exit %d, stderr %q; want %d and the backend's message", raw, code, stderr.String(), cli.ExitUnavailable)
		}
		if strings.Contains(stderr.String(), "pa55") {
			t.Errorf("the password leaked: %q", stderr.String())
		}
	}
}

// A backend that cannot list holders: status says so.
func TestStatusNeedsLister(t *testing.T) {
	t.Parallel()
	open := func(context.Context, string) (distlock.Backend, io.Closer, error) {
		return struct{ distlock.Backend }{memlock.New()}, nil, nil
	}
	var stderr strings.Builder
	code := cli.Run(context.Background(), []string{"--backend", "test://", "status"},
		cli.WithOpener("test", open), cli.WithStdio(strings.NewReader(""), io.Discard, &stderr))
	if code != cli.ExitUsage || !strings.Contains(stderr.String(), "cannot list") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}
