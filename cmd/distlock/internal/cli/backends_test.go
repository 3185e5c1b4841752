//go:build linux

package cli_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backends"
	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/testserver"
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
	open := func(_ context.Context, raw string) (driver.Backend, io.Closer, error) {
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
	open := func(context.Context, string) (driver.Backend, io.Closer, error) {
		return struct{ driver.Backend }{memlock.New()}, nil, nil
	}
	var stderr strings.Builder
	code := cli.Run(context.Background(), []string{"--backend", "test://", "status"},
		cli.WithOpener("test", open), cli.WithStdio(strings.NewReader(""), io.Discard, &stderr))
	if code != cli.ExitUsage || !strings.Contains(stderr.String(), "cannot list") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// runCLI runs distlock in this process and returns its exit code and
// standard error.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stderr strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := cli.Run(ctx, args, cli.WithStdio(strings.NewReader(""), io.Discard, &stderr),
		cli.WithGetenv(func(string) string { return "" }))
	return code, stderr.String()
}

// A URL without "//" names no host: it is refused with the form it should
// have, not opened on localhost, and the password is not shown.
func TestURLWithoutHost(t *testing.T) {
	t.Parallel()
	const secret = "Pa55-w0rd"
	for raw, form := range map[string]string{
		"redis:default:" + secret + "@10.0.0.5:6380/0":           "redis://",
		"rediss:default:" + secret + "@10.0.0.5:6380/0":          "rediss://",
		"redis+sentinel:default:" + secret + "@10.0.0.5:26379/m": "redis+sentinel://",
		"redis+cluster:default:" + secret + "@10.0.0.5:7000":     "redis+cluster://",
		"redis+cluster:":                          "redis+cluster://",
		"rediss+cluster:":                         "rediss+cluster://",
		"etcd:root:" + secret + "@10.0.0.5:2379":  "etcd://",
		"etcds:root:" + secret + "@10.0.0.5:2379": "etcds://",
		"redis:/u:" + secret + "@10.0.0.5:6380":   "redis://",
		"redis:///u:" + secret + "@10.0.0.5:6380": "redis://",
		"redis:///u:" + secret + "@h:p":           "redis://",
		"redis://":                                "redis://",
	} {
		code, stderr := runCLI(t, "--backend", raw, "status")
		if code != cli.ExitUsage || !strings.Contains(stderr, "want "+form) {
			t.Errorf("%s: exit %d, stderr %q; want %d naming the form %s", raw, code, stderr, cli.ExitUsage, form)
		}
		if strings.Contains(stderr, secret) {
			t.Errorf("%s: the password shows: %q", raw, stderr)
		}
	}
}

// An error names the backend once: the backend's own message, without a
// second copy of the URL (nor "file::" for the default).
func TestOpenErrorSaysItOnce(t *testing.T) {
	t.Parallel()
	closed := testserver.FreePort(t)
	for _, tc := range []struct{ raw, once string }{
		{fmt.Sprintf("redis://u:pw@127.0.0.1:%d/0?dial_timeout=1s", closed), fmt.Sprintf("127.0.0.1:%d/0", closed)},
		{"file:///dev/null/locks", "/dev/null"},
	} {
		code, stderr := runCLI(t, "--backend", tc.raw, "run", "k", "--", "true")
		if code != cli.ExitUnavailable {
			t.Errorf("%s: exit %d, want %d; stderr %q", tc.raw, code, cli.ExitUnavailable, stderr)
		}
		if n := strings.Count(stderr, tc.once); n != 1 || strings.Contains(stderr, "open backend") || strings.Count(stderr, "distlock:") != 1 {
			t.Errorf("%s: %q names %q %d times; want a message that says each thing once", tc.raw, stderr, tc.once, n)
		}
		if strings.Contains(stderr, ":pw@") {
			t.Errorf("%s: the password shows: %q", tc.raw, stderr)
		}
	}
}

// status on a lock directory that does not exist says nothing is held,
// and creates nothing.
func TestStatusCreatesNothing(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "b")
	code, stderr := runCLI(t, "--backend", "file://"+dir, "status")
	if code != 0 || !strings.Contains(stderr, "no lock held on file://"+dir) {
		t.Errorf("exit %d, stderr %q; want 0 and no lock held on file://%s", code, stderr, dir)
	}
	if _, err := os.Stat(filepath.Dir(dir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("status created %s (or its parent): %v", dir, err)
	}
	code, stderr = runCLI(t, "--backend", "file://"+dir, "status", "--json")
	if code != 0 {
		t.Errorf("status --json: exit %d, stderr %q", code, stderr)
	}
}

// The help lists the schemes of the backends package.
func TestHelpListsSchemes(t *testing.T) {
	t.Parallel()
	var stdout strings.Builder
	cli.Run(context.Background(), []string{"--help"}, cli.WithStdio(strings.NewReader(""), &stdout, io.Discard))
	help := strings.Join(strings.Fields(stdout.String()), " ")
	for _, s := range backends.Schemes() {
		if !strings.Contains(help, s+"://") {
			t.Errorf("the help does not list %s://: %q", s, help)
		}
	}
}

// The command's DISTLOCK_BACKEND has no secret query parameter, whatever
// its name's case or decoration (client_secret, auth_token), nor the
// password.
func TestCommandEnvironmentHasNoSecrets(t *testing.T) {
	const secret = "S3cret-x"
	t.Setenv("DISTLOCK_BACKEND", "test://u:"+secret+"@h/?client_secret="+secret+"&Auth_Token="+secret+"&x=1")
	srv := memlock.New()
	open := func(context.Context, string) (driver.Backend, io.Closer, error) { return srv, nopCloser{}, nil }
	var stdout, stderr strings.Builder
	code := cli.Run(context.Background(), []string{"run", "k", "--", "sh", "-c", `echo "$DISTLOCK_BACKEND"`},
		cli.WithOpener("test", open), cli.WithStdio(strings.NewReader(""), &stdout, &stderr))
	if want := "test://u@h/?x=1\n"; code != 0 || stdout.String() != want {
		t.Errorf("exit %d (stderr %q), the command sees %q; want %q", code, stderr.String(), stdout.String(), want)
	}
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }
