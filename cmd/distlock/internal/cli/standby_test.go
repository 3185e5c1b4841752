//go:build linux

package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/cmd/distlock/internal/cli/supervisor"
)

// supervisorsOf returns the supervisors that distlock process pid
// started: the processes run as `distlock __supervise PID`.
func supervisorsOf(t *testing.T, pid int) []int {
	t.Helper()
	paths, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var sups []int
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) >= 3 && args[1] == cli.SupervisorCommand && args[2] == strconv.Itoa(pid) {
			n, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			if alive(n) {
				sups = append(sups, n)
			}
		}
	}
	return sups
}

// holdKey runs distlock holding k until the test ends.
func holdKey(t *testing.T, e *env) *started {
	t.Helper()
	ready := e.path("holder.ready")
	h := e.start(e.command("run", "k", "--", "sh", "-c", "echo $$ > "+sh(ready)+"; exec sleep 600"))
	readInt(t, ready)
	return h
}

// The supervisor of a run is started while distlock initialises, before
// the lock is acquired, and is the one that then runs the command.
func TestSupervisorStartsBeforeTheLock(t *testing.T) {
	e := newEnv(t)
	h := holdKey(t, e)
	parent := e.path("parent")
	w := e.start(e.command("--verbose", "run", "k", "--", "sh", "-c", "echo $PPID > "+sh(parent)))
	waitFor(t, "the second run to wait", func() bool { return strings.Contains(w.stderr.String(), "acquiring") })
	var standby []int
	waitFor(t, "the waiting run's supervisor", func() bool {
		standby = supervisorsOf(t, w.cmd.Process.Pid)
		return len(standby) == 1
	})
	h.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(h)
	if r := e.wait(w); r.code != 0 {
		t.Fatalf("waiting run: exit %d, stderr %q", r.code, r.stderr)
	}
	if got := readInt(t, parent); got != standby[0] {
		t.Errorf("the command's parent is %d; want the supervisor started during the wait, %d", got, standby[0])
	}
}

// A supervisor started for a run that runs nothing ends with distlock:
// the lock was held (--no-wait), or distlock was killed while it waited.
func TestUnusedSupervisorEnds(t *testing.T) {
	e := newEnv(t)
	h := holdKey(t, e)
	t.Cleanup(func() { h.cmd.Process.Signal(syscall.SIGTERM); e.wait(h) })

	held := e.start(e.command("run", "--no-wait", "k", "--", "true"))
	if r := e.wait(held); r.code != cli.ExitNotAcquired {
		t.Fatalf("--no-wait on a held key: exit %d, stderr %q", r.code, r.stderr)
	}
	waitFor(t, "the supervisor of the --no-wait run to end", func() bool { return len(supervisorsOf(t, held.cmd.Process.Pid)) == 0 })

	w := e.start(e.command("--verbose", "run", "k", "--", "true"))
	waitFor(t, "the second run to wait", func() bool { return strings.Contains(w.stderr.String(), "acquiring") })
	var sups []int
	waitFor(t, "the waiting run's supervisor", func() bool {
		sups = supervisorsOf(t, w.cmd.Process.Pid)
		return len(sups) == 1
	})
	w.cmd.Process.Signal(syscall.SIGKILL)
	e.wait(w)
	waitGone(t, sups[0])
}

// A supervisor started early and killed while distlock waits for the lock
// is replaced: the command still runs, under a new supervisor.
func TestKilledEarlySupervisorIsReplaced(t *testing.T) {
	e := newEnv(t)
	h := holdKey(t, e)
	parent := e.path("parent")
	w := e.start(e.command("--verbose", "run", "k", "--", "sh", "-c", "echo $PPID > "+sh(parent)))
	waitFor(t, "the second run to wait", func() bool { return strings.Contains(w.stderr.String(), "acquiring") })
	var sups []int
	waitFor(t, "the waiting run's supervisor", func() bool {
		sups = supervisorsOf(t, w.cmd.Process.Pid)
		return len(sups) == 1
	})
	if err := syscall.Kill(sups[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, sups[0])
	h.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(h)
	r := e.wait(w)
	if r.code != 0 || !strings.Contains(r.stderr, "starting another") {
		t.Fatalf("exit %d, want 0 and a word on the new supervisor; stderr %q", r.code, r.stderr)
	}
	if got := readInt(t, parent); got == sups[0] {
		t.Errorf("the command's parent is the killed supervisor %d", got)
	}
}

// The supervisor runs from package early's init and exits there, before
// the CLI and the lock services' clients initialise (each would add to
// every run's start). Early's own init never ends, so the trace lists
// what initialised before it.
func TestSupervisorRunsBeforeHeavyInits(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(bin, cli.SupervisorCommand)
	cmd.Env = append(testEnviron(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != cli.ExitUsage || !strings.Contains(stderr.String(), "not by hand") {
		t.Fatalf("%s by hand: %v, stderr %q", cli.SupervisorCommand, err, stderr.String())
	}
	heavy := []string{ // a package, or those under a path ending in "/"
		"github.com/distlock/", // the CLI, the backends, the gateway
		"github.com/prometheus/client_golang/prometheus",
		"google.golang.org/protobuf/reflect/protodesc",
		"google.golang.org/grpc",
		"go.etcd.io/etcd/",
		"github.com/redis/go-redis/",
		"github.com/jackc/pgx/v5/pgtype",
	}
	n := 0
	for line := range strings.Lines(stderr.String()) {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "init" {
			continue
		}
		n++
		for _, h := range heavy {
			if f[1] == h || strings.HasSuffix(h, "/") && strings.HasPrefix(f[1], h) {
				t.Errorf("the supervisor initialised %s", f[1])
			}
		}
	}
	if n == 0 {
		t.Errorf("no init in the trace: %q", stderr.String())
	}
}

// The exit codes the supervisor reports are the CLI's.
func TestSupervisorExitCodes(t *testing.T) {
	for _, c := range []struct{ sup, cli int }{
		{supervisor.ExitUsage, cli.ExitUsage},
		{supervisor.ExitSoftware, cli.ExitSoftware},
		{supervisor.ExitLockLost, cli.ExitLockLost},
		{supervisor.ExitCannotExec, cli.ExitCannotExec},
		{supervisor.ExitNotFound, cli.ExitNotFound},
	} {
		if c.sup != c.cli {
			t.Errorf("the supervisor reports %d for the CLI's %d", c.sup, c.cli)
		}
	}
}
