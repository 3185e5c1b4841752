//go:build linux

package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/distlock/distlock/cmd/distlock/internal/cli/standby"
)

// The start message reaches the supervisor whole, with an environment
// larger than the socket's buffer and the lock file's descriptor (the same
// open file: the flock is shared), and the deadline line that follows it.
func TestStartMessageRoundTrip(t *testing.T) {
	sup, child, pw, err := standby.Pipes()
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Report.Close()
	defer pw.Close()
	defer child.Close()
	lockFile, err := os.Create(filepath.Join(t.TempDir(), "k.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lockFile.Close()
	env := []string{"BIG=" + strings.Repeat("x", 1<<20), "DISTLOCK_TOKEN=7", "EMPTY="}
	sent := StartMsg{Mode: "-,fg1,lock", Path: "/bin/echo", Argv: []string{"echo", "a b", ""}, Env: env, LockFile: lockFile}
	limit := Deadline{Term: 10, Kill: 20}
	sendErr := make(chan error, 1)
	go func() {
		sendErr <- SendStart(sup.Control, sent, limit)
		sup.Control.Close()
	}()
	got, rest, err := recvStart(int(child.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(got.lockFD)
	if got.Mode != sent.Mode || got.Path != sent.Path || !slices.Equal(got.Argv, sent.Argv) || !slices.Equal(got.Env, sent.Env) {
		t.Errorf("received %q %q %q and %d variables; sent %q %q %q and %d", got.Mode, got.Path, got.Argv, len(got.Env), sent.Mode, sent.Path, sent.Argv, len(sent.Env))
	}
	var a, b syscall.Stat_t
	if err := syscall.Fstat(got.lockFD, &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Fstat(int(lockFile.Fd()), &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || a.Dev != b.Dev {
		t.Errorf("the received descriptor is of another file")
	}
	if err := syscall.Flock(int(lockFile.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(got.lockFD, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("the received descriptor does not share the flock: %v", err)
	}
	if flags, err := fcntlFlags(got.lockFD); err != nil || flags&syscall.FD_CLOEXEC == 0 {
		t.Errorf("the received descriptor would reach the command (flags %#x, %v)", flags, err)
	}
	if !strings.HasPrefix(string(rest), limit.Line()) && !strings.HasPrefix(limit.Line(), string(rest)) {
		t.Errorf("after the message: %q, want the start of %q", rest, limit.Line())
	}
}

// A supervisor whose distlock closes the socket without a word starts
// nothing.
func TestStartMessageNone(t *testing.T) {
	sup, child, pw, err := standby.Pipes()
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Report.Close()
	defer pw.Close()
	defer child.Close()
	sup.Control.Close()
	if _, _, err := recvStart(int(child.Fd())); !errors.Is(err, errNoStart) {
		t.Errorf("recvStart = %v, want errNoStart", err)
	}
}

func fcntlFlags(fd int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// A start message in mode "lock" that comes without the lock file's
// descriptor (it did not arrive: truncated, or never sent) is refused: the
// supervisor would run the command with nothing keeping the flock held
// if distlock died.
func TestStartMessageLockWithoutDescriptor(t *testing.T) {
	sup, child, pw, err := standby.Pipes()
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Report.Close()
	defer pw.Close()
	defer child.Close()
	sent := StartMsg{Mode: "-," + ModeLockFile, Path: "/bin/true", Argv: []string{"true"}}
	if err := SendStart(sup.Control, sent, Deadline{}); err != nil {
		t.Fatal(err)
	}
	sup.Control.Close()
	got, _, err := recvStart(int(child.Fd()))
	if err == nil {
		syscall.Close(got.lockFD)
		t.Fatalf("recvStart accepted mode %q with lock file descriptor %d", got.Mode, got.lockFD)
	}
}
