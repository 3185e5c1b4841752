//go:build unix

package standby

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// runtimeVars are the Go runtime's settings, which the supervisor, a Go
// program, reads from its environment.
var runtimeVars = []string{"GODEBUG", "GOGC", "GOMAXPROCS", "GOMEMLIMIT", "GORACE", "GOTRACEBACK"}

// RuntimeEnv is the environment of a supervisor: the Go runtime's
// settings in environ, nothing else.
func RuntimeEnv(environ []string) []string {
	env := []string{}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(runtimeVars, name) {
			env = append(env, kv)
		}
	}
	return env
}

// Args is the supervisor's argument list.
func Args() []string { return []string{"distlock", Command, strconv.Itoa(os.Getpid())} }

// Pipes makes the report pipe and the control socket of a supervisor:
// s without Proc, the supervisor's end of the socket and the write end of
// the pipe, which the caller closes once the supervisor has them.
func Pipes() (s *Supervisor, child, reportW *os.File, err error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, err
	}
	// Close-on-exec as it is made (not every system has SOCK_CLOEXEC):
	// ForkLock keeps other starts from inheriting it meanwhile.
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		pr.Close()
		pw.Close()
		return nil, nil, nil, err
	}
	// distlock's end is non-blocking, so that closing it ends a write
	// blocked on a full socket.
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		pr.Close()
		pw.Close()
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, nil, err
	}
	return &Supervisor{Report: pr, Control: os.NewFile(uintptr(fds[0]), "supervisor control")},
		os.NewFile(uintptr(fds[1]), "control"), pw, nil
}
