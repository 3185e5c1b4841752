//go:build linux

package cli_test

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/distlock/distlock/testserver"
)

// What run does not cover, shown so that the documentation's list stays
// true: each test makes the gap bite.

// A process that leaves the command's process group (setsid) is neither
// signalled nor killed: it outlives the run, and the lock.
func TestLimitProcessLeavingTheGroupOutlivesTheLock(t *testing.T) {
	e := newEnv(t)
	pidFile := e.path("escaped.pid")
	r := e.run("run", "k", "--", "sh", "-c", fmt.Sprintf(`setsid sh -c 'echo $$ > %s; exec sleep 600' >/dev/null 2>&1 & while [ ! -s %[1]s ]; do sleep 0.01; done`, sh(pidFile)))
	escaped := readInt(t, pidFile)
	t.Cleanup(func() { syscall.Kill(escaped, syscall.SIGKILL) })
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if !alive(escaped) {
		t.Errorf("the process that left the group (setsid) was ended: the limit no longer holds, update the documentation")
	}
}

// kill -9 of distlock and its supervisor together leaves the command
// running without the lock: the key is granted again meanwhile.
func TestLimitKillingDistlockAndSupervisorLeavesTheCommand(t *testing.T) {
	e := newEnv(t)
	pidFile := e.path("a.pid")
	a := e.start(e.command("--verbose", "run", "k", "--", "sh", "-c", fmt.Sprintf(`echo $$ > %s; exec sleep 600`, sh(pidFile))))
	child := readInt(t, pidFile)
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	sup := supervisorPid(t, a)
	syscall.Kill(sup, syscall.SIGSTOP) // so that it cannot act on distlock's death
	a.cmd.Process.Signal(syscall.SIGKILL)
	syscall.Kill(sup, syscall.SIGKILL)
	e.wait(a)
	waitGone(t, sup)
	if r := e.run("run", "--timeout", "30s", "k", "--", "true"); r.code != 0 {
		t.Fatalf("next run: exit %d, stderr %q", r.code, r.stderr)
	}
	if !alive(child) {
		t.Errorf("the command ended with distlock and its supervisor killed together: the limit no longer holds, update the documentation")
	}
}

// On Redis, a pause of both distlock and its supervisor past the TTL lets
// the next holder in while the command runs: only fencing covers that.
func TestLimitPausingDistlockAndSupervisorOnRedis(t *testing.T) {
	e := newEnv(t)
	backend := "redis://" + testserver.StartRedis(t).Addr
	pidFile, log := e.path("a.pid"), e.path("log")
	a := e.start(e.command("--verbose", "--backend", backend, "run", "--ttl", "1s", "k", "--", "sh", "-c",
		fmt.Sprintf(`echo $$ > %s; while :; do echo a >> %s; sleep 0.005; done`, sh(pidFile), sh(log))))
	child := readInt(t, pidFile)
	sup := supervisorPid(t, a)
	syscall.Kill(sup, syscall.SIGSTOP)
	a.cmd.Process.Signal(syscall.SIGSTOP)
	r := e.run("--backend", backend, "run", "--timeout", "30s", "k", "--", "sh", "-c", fmt.Sprintf(`echo b >> %s; sleep 0.2`, sh(log)))
	if r.code != 0 {
		t.Fatalf("next run: exit %d, stderr %q", r.code, r.stderr)
	}
	b, _ := os.ReadFile(log)
	_, after, _ := strings.Cut(string(b), "b\n")
	syscall.Kill(sup, syscall.SIGCONT)
	a.cmd.Process.Signal(syscall.SIGCONT)
	e.wait(a)
	waitGone(t, child)
	if !strings.Contains(after, "a\n") {
		t.Errorf("no write of the paused holder's command after the next grant: the limit no longer holds, update the documentation")
	}
}
