//go:build linux

package cli_test

import (
	"strings"
	"syscall"
	"testing"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
)

// A timeout bounds the wait for a held lock: one try is always made, even
// with a timeout shorter than the try takes.
func TestTimeoutMakesOneTry(t *testing.T) {
	e := newEnv(t)
	if r := e.run("run", "--timeout", "1ns", "k", "--", "true"); r.code != 0 {
		t.Errorf("--timeout 1ns on a free key: exit %d, stderr %q; want 0", r.code, r.stderr)
	}
}

// For cron: --held-exit chooses the status of "not acquired" and --quiet
// silences it, while a failing service is still reported.
func TestHeldExitAndQuiet(t *testing.T) {
	e := newEnv(t)
	holder, _, _ := e.holdKey("k", "holder")
	for _, tc := range []struct {
		args   []string
		code   int
		silent bool
	}{
		{[]string{"--no-wait", "--held-exit", "0", "--quiet"}, 0, true},
		{[]string{"--no-wait", "--held-exit", "3", "-q"}, 3, true},
		{[]string{"--timeout", "100ms", "--held-exit", "4", "--quiet"}, 4, true},
		{[]string{"--no-wait", "--held-exit", "5"}, 5, false},
		{[]string{"--no-wait"}, cli.ExitNotAcquired, false},
	} {
		r := e.run(append(append([]string{"run"}, tc.args...), "k", "--", "true")...)
		if r.code != tc.code || (r.stderr == "") != tc.silent {
			t.Errorf("%q on a held key: exit %d, stderr %q; want %d, silent %v", tc.args, r.code, r.stderr, tc.code, tc.silent)
		}
	}
	if r := e.run("run", "--no-wait", "--held-exit", "256", "k", "--", "true"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "--held-exit") {
		t.Errorf("--held-exit 256: exit %d, stderr %q; want %d", r.code, r.stderr, cli.ExitUsage)
	}
	holder.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(holder)

	// An unreachable service is not "held": 69, said even with --quiet.
	r := e.run("--backend", "redis://127.0.0.1:1", "run", "--timeout", "1s", "--quiet", "--held-exit", "0", "k", "--", "true")
	if r.code != cli.ExitUnavailable || r.stderr == "" {
		t.Errorf("unreachable service with --quiet --held-exit 0: exit %d, stderr %q; want %d and a message", r.code, r.stderr, cli.ExitUnavailable)
	}
}
