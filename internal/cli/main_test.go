package cli_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// bin is the distlock binary built for the tests.
var bin string

// TestMain builds the distlock command once (with the race detector when the
// tests have it), so that the tests run it as real processes.
func TestMain(m *testing.M) {
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
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
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
	cmd.Env = append(os.Environ(), "DISTLOCK_BACKEND=file://"+e.dir)
	return cmd
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
	if err := cmd.Start(); err != nil {
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
