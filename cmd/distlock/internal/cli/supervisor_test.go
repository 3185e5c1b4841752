//go:build linux

package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
)

// workerScript is a command whose work is done by a child (a grandchild
// of distlock, in the command's process group), which records its pid in
// pidFile; trap is run by the worker first.
func workerScript(pidFile, trap string) string {
	return fmt.Sprintf(`sh -c '%s echo $$ > %s; exec sleep 600'; echo the worker ended`, trap, pidFile)
}

// gone reports whether the probe written by probeCommand found the
// process dead (absent, or a zombie).
func gone(t *testing.T, probe string) bool {
	t.Helper()
	b, err := os.ReadFile(probe)
	if err != nil {
		t.Fatalf("no probe: %v", err)
	}
	s := string(b)
	if strings.TrimSpace(s) == "gone" {
		return true
	}
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// probeCommand records in probe whether pid exists when it runs.
func probeCommand(pid int, probe string) []string {
	return []string{"sh", "-c", fmt.Sprintf(`cat /proc/%d/stat > %s 2>/dev/null || echo gone > %s`, pid, sh(probe), sh(probe))}
}

// SIGKILL of distlock kills its whole job, the command's own children
// included, and the key is granted again only once they are gone: the
// supervisor keeps the lock file, and so the flock, until then.
func TestKilledDistlockKillsWholeJob(t *testing.T) {
	e := newEnv(t)
	workerPid := e.path("worker.pid")
	a := e.start(e.command("run", "k", "--", "sh", "-c", workerScript(workerPid, "")))
	worker := readInt(t, workerPid)
	t.Cleanup(func() { syscall.Kill(worker, syscall.SIGKILL) })

	probe := e.path("probe")
	b := e.start(e.command(append([]string{"--verbose", "run", "--timeout", "1m", "k", "--"}, probeCommand(worker, probe)...)...))
	waitFor(t, "the second run to wait", func() bool { return strings.Contains(b.stderr.String(), "acquiring") })
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.wait(a)
	if r := e.wait(b); r.code != 0 {
		t.Fatalf("waiting run: exit %d, stderr %q", r.code, r.stderr)
	}
	if !gone(t, probe) {
		t.Errorf("the key was granted again while the killed run's worker %d still ran", worker)
	}
	waitGone(t, worker)
}

// A command that changes its user (setpriv, su, sudo -u) loses the
// kernel's parent-death signal; the supervisor, which runs as distlock's
// user, still kills it when distlock dies (here distlock runs as root).
func TestKilledDistlockKillsCommandOfAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the command as another user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv")
	}
	e := newEnv(t)
	pidFile := e.path("pid")
	a := e.start(e.command("run", "k", "--", "sh", "-c",
		fmt.Sprintf("echo $$ > %s; exec %s --reuid=65534 --regid=65534 --clear-groups sleep 600", sh(pidFile), setpriv)))
	pid := readInt(t, pidFile)
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	waitFor(t, "the command to run as uid 65534", func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		name, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return strings.Contains(string(b), "\nUid:\t65534\t") && strings.TrimSpace(string(name)) == "sleep"
	})
	a.cmd.Process.Signal(syscall.SIGKILL)
	e.wait(a)
	waitGone(t, pid)
	if r := e.run("run", "--timeout", "1m", "k", "--", "true"); r.code != 0 {
		t.Errorf("the key was not freed: exit %d, %q", r.code, r.stderr)
	}
}

// On loss the whole job is terminated, not only the command: its worker
// (a grandchild of distlock) is gone when distlock exits 76, whether it
// obeys SIGTERM or only dies of the SIGKILL after --grace.
func TestLossEndsWholeJob(t *testing.T) {
	for _, tc := range []struct{ name, trap string }{
		{"ObeysSIGTERM", ""},
		{"IgnoresSIGTERM", `trap "" TERM;`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			workerPid := e.path("worker.pid")
			a := e.start(e.command("run", "--ttl", "600ms", "--grace", "200ms", "k", "--", "sh", "-c", workerScript(workerPid, tc.trap)))
			worker := readInt(t, workerPid)
			t.Cleanup(func() { syscall.Kill(worker, syscall.SIGKILL) })
			os.Remove(filepath.Join(e.dir, "k.lock")) // the lock is lost at the next renewal
			r := e.wait(a)
			if r.code != cli.ExitLockLost {
				t.Fatalf("exit %d, want %d; stderr %q", r.code, cli.ExitLockLost, r.stderr)
			}
			if alive(worker) {
				t.Errorf("distlock exited 76 while the command's worker %d still runs without the lock", worker)
			}
		})
	}
}

// When the command exits, what it left running in its group is killed
// before the lock is released: no worker outlives the lock.
func TestExitEndsWholeJob(t *testing.T) {
	e := newEnv(t)
	workerPid := e.path("worker.pid")
	r := e.run("run", "k", "--", "sh", "-c", fmt.Sprintf("sleep 600 & echo $! > %s; exit 3", sh(workerPid)))
	worker := readInt(t, workerPid)
	t.Cleanup(func() { syscall.Kill(worker, syscall.SIGKILL) })
	if r.code != 3 {
		t.Errorf("exit %d, want the command's 3; stderr %q", r.code, r.stderr)
	}
	if alive(worker) {
		t.Errorf("distlock exited while the command's background worker %d still runs", worker)
	}
}

// A supervisor killed by someone else while distlock lives: distlock kills
// the command's group itself, says so, exits 70, and frees the key.
func TestSupervisorKilled(t *testing.T) {
	e := newEnv(t)
	workerPid := e.path("worker.pid")
	a := e.start(e.command("--verbose", "run", "k", "--", "sh", "-c", workerScript(workerPid, "")))
	worker := readInt(t, workerPid)
	t.Cleanup(func() { syscall.Kill(worker, syscall.SIGKILL) })
	sup := supervisorPid(t, a)
	if err := syscall.Kill(sup, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := e.wait(a)
	if r.code != cli.ExitSoftware || !strings.Contains(r.stderr, "supervisor") {
		t.Errorf("exit %d, want %d and a word on the supervisor; stderr %q", r.code, cli.ExitSoftware, r.stderr)
	}
	if alive(worker) {
		t.Errorf("distlock exited while the command's worker %d still runs", worker)
	}
	if r := e.run("run", "--no-wait", "k", "--", "true"); r.code != 0 {
		t.Errorf("the key was not freed: exit %d, %q", r.code, r.stderr)
	}
}

// The supervisor is not a command for users: not in the help, and refused
// when run by hand.
func TestSupervisorIsHidden(t *testing.T) {
	e := newEnv(t)
	if r := e.run("--help"); r.code != 0 || strings.Contains(r.stdout, cli.SupervisorCommand) {
		t.Errorf("--help: exit %d, stdout %q", r.code, r.stdout)
	}
	if r := e.run(cli.SupervisorCommand, "1", "-", "/bin/true", "--", "true"); r.code != cli.ExitUsage || !strings.Contains(r.stderr, "not by hand") {
		t.Errorf("%s by hand: exit %d, stderr %q", cli.SupervisorCommand, r.code, r.stderr)
	}
}
