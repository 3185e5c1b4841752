package testserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// InstallHint is the command that installs the server binaries used by this
// package; it is included in the message when a binary is missing.
const InstallHint = "scripts/install-test-deps.sh"

const (
	// startTimeout bounds how long a server may take to become ready.
	startTimeout = 15 * time.Second
	// clusterStartTimeout bounds how long a multi-node cluster may take.
	clusterStartTimeout = 30 * time.Second
	// stopTimeout bounds a graceful stop before the process group is killed.
	stopTimeout = 10 * time.Second
	// startAttempts is how many times a start is tried with fresh ports.
	startAttempts = 3
	// pollInterval is the delay between two readiness probes.
	pollInterval = 25 * time.Millisecond
)

// Require returns the path of the executable bin (a name looked up in PATH,
// or a path). If it is missing, the test is skipped, or fails with t.Fatalf
// when the environment variable CI is "true"; the message names the binary
// and the install command.
func Require(t testing.TB, bin string) string {
	t.Helper()
	path, err := lookBin(bin)
	if err != nil {
		Missing(t, bin)
	}
	return path
}

// Missing reports that the named dependency is not installed: it calls
// t.Fatalf when the environment variable CI is "true" and t.Skipf otherwise.
// The message names what is missing and the install command.
func Missing(t testing.TB, what string) {
	t.Helper()
	msg := fmt.Sprintf("testserver: %s not found; install the test dependencies with %s", what, InstallHint)
	if inCI() {
		t.Fatalf("%s (CI=true, refusing to skip)", msg)
	}
	t.Skipf("%s", msg)
}

func inCI() bool {
	v := strings.TrimSpace(os.Getenv("CI"))
	return strings.EqualFold(v, "true") || v == "1"
}

func lookBin(bin string) (string, error) {
	if strings.ContainsRune(bin, os.PathSeparator) {
		st, err := os.Stat(bin)
		if err != nil {
			return "", err
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not executable", bin)
		}
		return bin, nil
	}
	return exec.LookPath(bin)
}

var (
	portsMu sync.Mutex
	// portsUsed holds the ports handed out in this process, so that two
	// servers of the same test binary never get the same port.
	portsUsed = map[int]bool{}
)

// FreePort returns a TCP port on 127.0.0.1 that was free when checked and
// that this process has not handed out before. Another process may still take
// it before the server binds it; the Start functions retry with new ports
// when that happens.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatalf("testserver: find free port: %v", err)
	}
	return port
}

func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsUsed[port] {
			portsUsed[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no unused port after 100 tries")
}

func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// tcpReady reports whether something accepts TCP connections on addr.
func tcpReady(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// exitedError reports that a server process exited while we waited for it.
type exitedError struct {
	p   *Process
	err error
}

func (e *exitedError) Error() string {
	return fmt.Sprintf("%s exited during startup: %v", e.p.name, e.err)
}

// waitUntil polls check every pollInterval until it succeeds, one of procs
// exits (an *exitedError) or deadline passes.
func waitUntil(deadline time.Time, procs []*Process, check func() error) error {
	for {
		for _, p := range procs {
			if exited, err := p.exitStatus(); exited {
				return &exitedError{p: p, err: err}
			}
		}
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready in time: %w", err)
		}
		time.Sleep(pollInterval)
	}
}

// awaitAll waits until each of procs passes its readiness probe, all before
// deadline. A cluster's members are all started first and probed
// afterwards, as none of them can serve before a quorum runs.
func awaitAll(deadline time.Time, procs []*Process) error {
	for _, p := range procs {
		if err := p.awaitReady(deadline); err != nil {
			return err
		}
	}
	return nil
}

// retryable reports whether a failed start should be retried with new ports:
// a process exited early (typically a port taken by another process) or a log
// reports a bind failure.
func retryable(err error, procs []*Process) bool {
	var ee *exitedError
	if errors.As(err, &ee) {
		return true
	}
	for _, p := range procs {
		if strings.Contains(strings.ToLower(p.logTail()), "already in use") {
			return true
		}
	}
	return false
}

// startFailure formats a start error with the log tails of procs.
func startFailure(what string, err error, procs []*Process) string {
	var b strings.Builder
	fmt.Fprintf(&b, "testserver: %s did not start: %v", what, err)
	for _, p := range procs {
		fmt.Fprintf(&b, "\n--- tail of %s (%s) ---\n%s", p.name, p.logPath, p.logTail())
	}
	return b.String()
}

// startWithRetry calls attempt up to startAttempts times. attempt launches
// its processes (Process.launch, which registers their cleanup) and returns
// them with an error; on a retryable error those processes are stopped and
// attempt is called again (it must pick new ports). On a final error the
// test fails with the servers' log tails.
func startWithRetry(t testing.TB, what string, attempt func() ([]*Process, error)) {
	t.Helper()
	for i := 1; ; i++ {
		procs, err := attempt()
		if err == nil {
			return
		}
		if i < startAttempts && retryable(err, procs) {
			t.Logf("testserver: %s start attempt %d failed, retrying with new ports: %v", what, i, err)
			for _, p := range procs {
				p.Stop()
			}
			continue
		}
		t.Fatal(startFailure(what, err, procs))
	}
}

// quorum reports whether more than half of procs are running.
func quorum(procs []*Process) bool {
	n := 0
	for _, p := range procs {
		if p.Running() {
			n++
		}
	}
	return 2*n > len(procs)
}
