//go:build linux

package cli_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
)

// Signals ignored when distlock starts (nohup) stay ignored, by distlock
// and by the command: a SIGHUP does not end the job.
func TestIgnoredSignalsStayIgnored(t *testing.T) {
	e := newEnv(t)
	pidFile, goFile := e.path("pid"), e.path("go")
	inner := e.command("run", "k", "--", "sh", "-c",
		fmt.Sprintf("echo $$ > %s; while [ ! -e %s ]; do sleep 0.02; done", sh(pidFile), sh(goFile)))
	// What nohup does: SIGHUP ignored, then exec.
	cmd := exec.Command("sh", append([]string{"-c", `trap "" HUP; exec "$0" "$@"`}, inner.Args...)...)
	cmd.Env = inner.Env
	s := e.start(cmd)
	pid := readInt(t, pidFile)
	if !ignores(t, s.cmd.Process.Pid, syscall.SIGHUP) {
		t.Errorf("distlock, started with SIGHUP ignored, catches it")
	}
	if !ignores(t, pid, syscall.SIGHUP) {
		t.Errorf("the command of a distlock started with SIGHUP ignored does not ignore it")
	}
	s.cmd.Process.Signal(syscall.SIGHUP)
	os.WriteFile(goFile, nil, 0o600)
	if r := e.wait(s); r.code != 0 {
		t.Errorf("exit %d, want 0: SIGHUP ended the job; stderr %q", r.code, r.stderr)
	}
}

// When the command dies of SIGHUP, SIGINT, SIGQUIT or SIGTERM, distlock
// releases the lock and dies of the same signal, as a shell expects of
// the programs it runs (a loop stops on Ctrl-C). A command that exits
// 130 by itself makes distlock exit 130.
func TestDiesOfTheCommandsSignal(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir() // for core files, should any be dumped
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM} {
		name := unix.SignalName(sig)[3:]
		cmd := e.command("run", "k", "--", "sh", "-c", "kill -"+name+" $$")
		cmd.Dir = dir
		s := e.start(cmd)
		e.wait(s)
		if ws := s.cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != sig {
			t.Errorf("the command died of %v; distlock %v, want killed by the same signal", sig, s.cmd.ProcessState)
		}
		if r := e.run("run", "--no-wait", "k", "--", "true"); r.code != 0 {
			t.Errorf("%v: the lock was not released: exit %d, %q", sig, r.code, r.stderr)
		}
	}
	s := e.start(e.command("run", "k", "--", "sh", "-c", "exit 130"))
	e.wait(s)
	if ws := s.cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Exited() || ws.ExitStatus() != 130 {
		t.Errorf("the command exited 130; distlock %v, want exit status 130", s.cmd.ProcessState)
	}

	// A wait for the lock ended by SIGINT: the same.
	holder, _, _ := e.holdKey("k", "holder")
	w := e.start(e.command("--verbose", "run", "k", "--", "true"))
	waitFor(t, "the waiter to wait", func() bool { return strings.Contains(w.stderr.String(), "acquiring") })
	w.cmd.Process.Signal(syscall.SIGINT)
	e.wait(w)
	if ws := w.cmd.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("a waiter interrupted by SIGINT: %v, want killed by SIGINT", w.cmd.ProcessState)
	}
	holder.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(holder)
}

// Every signal someone may send on purpose reaches the command, and the
// whole process group: here a worker started by the command gets them too.
func TestSignalsReachTheGroup(t *testing.T) {
	e := newEnv(t)
	log, pidFile, goFile, ready := e.path("log"), e.path("pid"), e.path("go"), e.path("ready")
	sigs := []string{"USR1", "USR2", "QUIT", "ALRM", "VTALRM", "WINCH", "CONT", "HUP"}
	var traps string
	for _, s := range sigs {
		traps += fmt.Sprintf(`trap "echo $who %[1]s >> %[2]s" %[1]s; `, s, sh(log))
	}
	script := fmt.Sprintf(`who=worker; %[1]s touch %[4]s; while [ ! -e %[3]s ]; do sleep 0.02; done`, traps, sh(log), sh(goFile), sh(ready))
	s := e.start(e.command("run", "k", "--", "sh", "-c", fmt.Sprintf(
		`sh -c %[1]s & who=command; %[2]s echo $$ > %[3]s; while [ ! -e %[4]s ]; do sleep 0.02; done; wait`,
		sh(script), traps, sh(pidFile), sh(goFile))))
	readInt(t, pidFile)
	waitFor(t, "the worker to set its traps", func() bool { _, err := os.Stat(ready); return err == nil })
	for _, name := range sigs {
		sig := unix.SignalNum("SIG" + name)
		if err := s.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		for _, who := range []string{"command", "worker"} {
			if who == "worker" && name == "QUIT" {
				continue // a shell starts its background jobs with SIGQUIT ignored
			}
			want := who + " " + name + "\n"
			waitFor(t, fmt.Sprintf("%s to get SIG%s", who, name), func() bool {
				b, _ := os.ReadFile(log)
				return strings.Contains(string(b), want)
			})
		}
	}
	os.WriteFile(goFile, nil, 0o600)
	if r := e.wait(s); r.code != 0 {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}

// On loss the command is signalled before distlock says anything: here
// distlock's standard error is a full pipe, so its first message blocks
// it, and the command must get SIGTERM all the same. (The command writes
// its own messages elsewhere.)
func TestLossSignalsBeforeLogging(t *testing.T) {
	e := newEnv(t)
	pidFile, mark := e.path("pid"), e.path("mark")
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	fillPipe(t, wr)
	cmd := e.command("run", "--ttl", "600ms", "--grace", "1m", "k", "--", "sh", "-c",
		fmt.Sprintf(`exec 2>/dev/null; trap "echo TERM > %s; exit 0" TERM; echo $$ > %s; while :; do sleep 0.02; done`, sh(mark), sh(pidFile)))
	cmd.Stdout, cmd.Stderr = io.Discard, wr
	if err := startDying(cmd); err != nil {
		t.Fatal(err)
	}
	wr.Close()
	t.Cleanup(func() { cmd.Process.Kill() })
	readInt(t, pidFile)
	os.Remove(filepath.Join(e.dir, "k.lock")) // the lock is lost at the next renewal
	waitFor(t, "the command to get SIGTERM while distlock cannot write", func() bool { _, err := os.Stat(mark); return err == nil })
	out, _ := io.ReadAll(rd)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != cli.ExitLockLost || !strings.Contains(string(out), "lost the lock") {
		t.Errorf("exit %d, want %d; stderr %q", code, cli.ExitLockLost, out)
	}
}

// fillPipe fills the pipe of w to its capacity, reduced to a page.
func fillPipe(t *testing.T, w *os.File) {
	t.Helper()
	rc, err := w.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		unix.FcntlInt(fd, unix.F_SETPIPE_SZ, os.Getpagesize())
		unix.SetNonblock(int(fd), true)
		buf := make([]byte, 512)
		for {
			if _, err := unix.Write(int(fd), buf); err != nil {
				break
			}
		}
		unix.SetNonblock(int(fd), false)
	})
}
