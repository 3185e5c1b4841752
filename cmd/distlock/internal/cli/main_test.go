//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
)

// bin is the distlock binary built for the tests.
var bin string

// TestMain builds the distlock command once (with the race detector when the
// tests have it), so that the tests run it as real processes. Run in this
// process starts this test binary again as the supervisor of its commands.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == cli.SupervisorCommand {
		os.Exit(cli.Run(context.Background(), os.Args[1:]))
	}
	// A test run started with a signal ignored (SIGHUP under nohup, SIGINT
	// and SIGQUIT in the background of a non-interactive shell) would pass
	// that on to every process it starts, and the commands these tests run
	// could then not be hung up or interrupted: the signal tests would fail
	// for the environment, not for distlock. A signal this process catches
	// is reset to its default action in a child at exec, one it ignores is
	// not; catching only the ignored ones leaves ^C working.
	for _, sig := range []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT} {
		if signal.Ignored(sig) {
			signal.Notify(make(chan os.Signal, 1), sig)
		}
	}
	dir, err := os.MkdirTemp("", "distlock-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bin = filepath.Join(dir, "distlock")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/distlock/distlock/cmd/distlock")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building distlock:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction(spawnerFunc), goleak.Cleanup(func(code int) {
		os.RemoveAll(dir)
		os.Exit(code)
	}))
}

// env is a test's environment for the distlock processes: a private lock
// directory.
type env struct {
	t   *testing.T
	dir string // lock directory
	tmp string // scratch files
}

func newEnv(t *testing.T) *env {
	t.Parallel()
	return &env{t: t, dir: filepath.Join(t.TempDir(), "locks"), tmp: t.TempDir()}
}

// path returns a scratch file path.
func (e *env) path(name string) string { return filepath.Join(e.tmp, name) }

// command returns distlock with args, on the test's lock directory.
func (e *env) command(args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(testEnviron(), "DISTLOCK_BACKEND=file://"+e.dir)
	return cmd
}

// testEnviron is the environment of the distlock processes: this one's,
// without the race detector's pause at exit (1s, twice per run with the
// supervisor).
func testEnviron() []string {
	return append(os.Environ(), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
}

// result is a finished distlock process.
type result struct {
	code           int
	stdout, stderr string
}

// run runs distlock to completion (bounded by a minute).
func (e *env) run(args ...string) result {
	e.t.Helper()
	return e.wait(e.start(e.command(args...)))
}

// started is a running distlock process with captured output.
type started struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
}

func (e *env) start(cmd *exec.Cmd) *started {
	e.t.Helper()
	s := &started{cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = s.stdout, s.stderr
	// A process left behind that keeps the output pipes open must fail the
	// test (it checks for such processes), not hang it.
	cmd.WaitDelay = 5 * time.Second
	if err := startDying(cmd); err != nil {
		e.t.Fatalf("start %v: %v", cmd.Args, err)
	}
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return s
}

// spawnRequest is a process for the spawner to start.
type spawnRequest struct {
	cmd *exec.Cmd
	err chan<- error
}

var (
	spawnOnce sync.Once
	spawnc    chan spawnRequest
)

// spawnerFunc is the spawner's function, which goleak ignores: it lives
// as long as the process.
const spawnerFunc = "github.com/distlock/distlock/cmd/distlock/internal/cli_test.spawner"

// startDying starts cmd with SIGKILL as its parent-death signal, so that
// it dies with this process however this process ends (a test timed out
// and panicked, or the test binary got SIGKILL) instead of being left
// running, a partition member still holding its units and running their
// commands. (A member's supervisors then end its commands, their own
// parent having died.) The kernel sends the signal when the thread that
// started the child ends, not the process, and the Go runtime ends a
// thread when a goroutine locked to it exits: so every such process is
// started by one goroutine, the spawner, locked to its thread and never
// exiting, whose thread thus ends only with the process.
func startDying(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnc = make(chan spawnRequest)
		go spawner(spawnc)
	})
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	errc := make(chan error, 1)
	spawnc <- spawnRequest{cmd, errc}
	return <-errc
}

// spawner starts the processes of startDying on its own thread, which it
// never unlocks and never leaves.
func spawner(reqs <-chan spawnRequest) {
	runtime.LockOSThread()
	for r := range reqs {
		r.err <- r.cmd.Start()
	}
}

func (e *env) wait(s *started) result {
	e.t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		<-done
		e.t.Fatalf("%v did not finish in a minute; stderr: %s", s.cmd.Args, s.stderr)
	}
	code := s.cmd.ProcessState.ExitCode()
	if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return result{code: code, stdout: s.stdout.String(), stderr: s.stderr.String()}
}

// waitFor waits, up to a minute, until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readInt waits for a file holding a number and returns it.
func readInt(t *testing.T, path string) int {
	t.Helper()
	var n int
	waitFor(t, "a number in "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		n, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return n
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("process %d to end", pid), func() bool { return !alive(pid) })
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// sh quotes s for a shell.
func sh(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// procStat returns the state, parent and process group of process pid.
func procStat(pid int) (state byte, ppid, pgrp int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 3 {
		return 0, 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	pgrp, _ = strconv.Atoi(f[2])
	return f[0][0], ppid, pgrp, true
}

// childOf waits for the child of process ppid whose command name is comm
// and returns its pid.
func childOf(t *testing.T, ppid int, comm string) int {
	t.Helper()
	var child int
	waitFor(t, fmt.Sprintf("a child %q of %d", comm, ppid), func() bool {
		dir, _ := os.ReadDir("/proc")
		for _, d := range dir {
			pid, err := strconv.Atoi(d.Name())
			if err != nil {
				continue
			}
			name, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if _, pp, _, ok := procStat(pid); ok && pp == ppid && strings.TrimSpace(string(name)) == comm {
				child = pid
				return true
			}
		}
		return false
	})
	return child
}

// signalMask returns the mask of the signals process pid ignores (SigIgn)
// or catches (SigCgt).
func signalMask(t *testing.T, pid int, field string) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func ignores(t *testing.T, pid int, sig syscall.Signal) bool {
	return signalMask(t, pid, "SigIgn")&(1<<(sig-1)) != 0
}

// supervisorPid returns the pid of the supervisor from the log of a
// distlock --verbose run.
func supervisorPid(t *testing.T, s *started) int {
	t.Helper()
	var pid int
	waitFor(t, "the command to start", func() bool {
		for _, f := range strings.Fields(s.stderr.String()) {
			if v, ok := strings.CutPrefix(f, "supervisor="); ok {
				pid, _ = strconv.Atoi(v)
				return pid > 0
			}
		}
		return false
	})
	return pid
}
