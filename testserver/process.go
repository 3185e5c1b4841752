package testserver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is one server process started by this package: a Redis server or
// Sentinel, an etcd or ZooKeeper member, a PostgreSQL postmaster, a
// PgBouncer. The server types embed it and add only what is their own (the
// command line, the configuration file, the readiness probe, the client
// address); the life cycle is the same for all of them:
//
//   - the process is a child of the test binary in a process group of its
//     own, and on Linux the kernel sends it SIGKILL when the thread of the
//     test binary that started it dies, so no server outlives the test
//     process, even one killed with SIGKILL;
//   - a t.Cleanup of the test that started it stops it (gracefully, then
//     SIGKILL after a deadline) and waits until it and the descendants it
//     killed have exited;
//   - Restart runs the same command line again, on the same ports and data
//     directory, and waits, with a deadline, until the server's readiness
//     probe succeeds.
//
// Its methods are safe for concurrent use.
type Process struct {
	name    string   // for messages, e.g. "redis-server 127.0.0.1:1234"
	path    string   // executable
	args    []string // arguments
	dir     string   // working directory
	env     []string // nil: inherit
	logPath string   // stdout and stderr are appended here
	stopSig syscall.Signal
	runAs   *runAsUser // nil: current user
	// ready is the readiness probe: nil once the server serves requests.
	// Nil: the process is ready when it has started.
	ready func() error
	// readyTimeout bounds how long Restart waits for ready.
	readyTimeout time.Duration
	// alive is the probe of RestartAlone: nil once the server accepts
	// connections, whether or not it serves. Nil: ready.
	alive func() error

	mu  sync.Mutex
	cur *run // nil if never started
}

// run is one execution of a Process.
type run struct {
	cmd  *exec.Cmd
	done chan struct{} // closed after cmd.Wait returned
	err  error         // cmd.Wait result, valid after done is closed
}

func (r *run) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// launch registers the cleanup of p on t, then starts p. The cleanup comes
// first so that a process whose start half succeeded is stopped too.
func (p *Process) launch(t testing.TB) error {
	t.Cleanup(p.shutdown)
	return p.start()
}

// start launches the process. It fails if it is already running.
func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil && !p.cur.exited() {
		return fmt.Errorf("%s is already running", p.name)
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own descriptor
	fmt.Fprintf(f, "=== testserver %s: %s %q\n", time.Now().Format(time.RFC3339Nano), p.path, p.args)

	cmd := exec.Command(p.path, p.args...)
	cmd.Dir = p.dir
	cmd.Env = p.env
	// *os.File outputs are passed to the child directly, so exec starts no
	// copying goroutines.
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = sysProcAttr(p.runAs)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	r := &run{cmd: cmd, done: make(chan struct{})}
	// This goroutine ends when the process exits; every path that stops the
	// process waits for r.done, so it never outlives the cleanup.
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	p.cur = r
	return nil
}

// awaitReady polls the readiness probe until it succeeds, the process exits
// (an *exitedError) or deadline passes.
func (p *Process) awaitReady(deadline time.Time) error {
	if p.ready == nil {
		return nil
	}
	return waitUntil(deadline, []*Process{p}, p.ready)
}

func (p *Process) current() *run {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// Running reports whether the process has been started and has not exited.
// A paused process is running.
func (p *Process) Running() bool {
	r := p.current()
	return r != nil && !r.exited()
}

// Pid returns the process id of the running process, or 0 if it is not
// running.
func (p *Process) Pid() int {
	r := p.current()
	if r == nil || r.exited() {
		return 0
	}
	return r.cmd.Process.Pid
}

// exitStatus reports whether the last run exited, and its Wait error.
func (p *Process) exitStatus() (exited bool, err error) {
	r := p.current()
	if r == nil || !r.exited() {
		return false, nil
	}
	if r.err == nil {
		return true, errors.New("exit status 0")
	}
	return true, r.err
}

// Kill sends SIGKILL to the process, its process group and its descendants,
// simulating a crash, and waits until they have exited. It does nothing if
// the process is not running.
func (p *Process) Kill() {
	r := p.current()
	if r == nil || r.exited() {
		return
	}
	kids := killTree(r.cmd.Process)
	<-r.done
	waitGone(kids)
}

// Stop shuts the server down gracefully with its own stop signal (SIGTERM;
// for PostgreSQL SIGINT, its fast shutdown), continuing it first if it is
// paused, and waits for it to exit; after a deadline of 10s it is killed as
// by Kill. It does nothing if the process is not running.
func (p *Process) Stop() { p.stop(stopTimeout) }

func (p *Process) stop(timeout time.Duration) {
	r := p.current()
	if r == nil || r.exited() {
		return
	}
	_ = r.cmd.Process.Signal(p.stopSig)
	// A paused process must run to handle the signal.
	_ = signalGroup(r.cmd.Process, sigCont)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C:
		kids := killTree(r.cmd.Process)
		<-r.done
		waitGone(kids)
	}
}

// waitGone waits (bounded) until the killed descendants pids have exited, so
// that they no longer hold ports, files or shared memory.
func waitGone(pids []int) {
	deadline := time.Now().Add(stopTimeout)
	for _, pid := range pids {
		for !procGone(pid) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// shutdown is the cleanup action.
func (p *Process) shutdown() { p.Stop() }

// Pause freezes the process, its process group and its descendants with
// SIGSTOP and, on Linux, returns once the kernel reports them stopped: from
// then on connections stay open but nothing is answered until Resume.
func (p *Process) Pause() error {
	r := p.current()
	if r == nil || r.exited() {
		return fmt.Errorf("testserver: pause %s: not running", p.name)
	}
	if err := signalGroup(r.cmd.Process, sigStop); err != nil {
		return fmt.Errorf("testserver: pause %s: %w", p.name, err)
	}
	if err := waitStopped(r.cmd.Process.Pid, time.Now().Add(stopTimeout)); err != nil {
		return fmt.Errorf("testserver: pause %s: %w", p.name, err)
	}
	return nil
}

// Resume continues a process frozen by Pause (SIGCONT to the process, its
// group and its descendants).
func (p *Process) Resume() error {
	r := p.current()
	if r == nil || r.exited() {
		return fmt.Errorf("testserver: resume %s: not running", p.name)
	}
	if err := signalGroup(r.cmd.Process, sigCont); err != nil {
		return fmt.Errorf("testserver: resume %s: %w", p.name, err)
	}
	return nil
}

// Restart starts the server again with the same command line, ports and
// data directory (stopping it first, as Stop does, if it is running), so
// that what it persisted before a Stop or Kill can be read back, and waits
// until its readiness probe succeeds. The probe is the one of the Start
// function, except for members of an etcd cluster or a ZooKeeper ensemble
// without a running quorum: they cannot serve yet, so Restart only waits
// until the member accepts connections. The test fails, with the tail of
// the server's log, if the server does not become ready in time.
func (p *Process) Restart(t testing.TB) {
	t.Helper()
	p.Stop()
	err := p.start()
	if err == nil {
		err = p.awaitReady(time.Now().Add(p.readyTimeout))
	}
	if err != nil {
		t.Fatal(startFailure(p.name, err, []*Process{p}))
	}
}

// RestartAlone starts the server again as Restart does, but waits only
// until it accepts connections, not until it serves: for a member of an
// ensemble cut off from its peers, which cannot serve before its links
// heal. For a ZooKeeper member it waits for ruok's answer, for an etcd
// member until its client port accepts connections; for other servers it
// is Restart.
func (p *Process) RestartAlone(t testing.TB) {
	t.Helper()
	p.Stop()
	err := p.start()
	if err == nil {
		probe := p.alive
		if probe == nil {
			probe = p.ready
		}
		if probe != nil {
			err = waitUntil(time.Now().Add(p.readyTimeout), []*Process{p}, probe)
		}
	}
	if err != nil {
		t.Fatal(startFailure(p.name, err, []*Process{p}))
	}
}

// logTail returns about the last 40 lines of the log file.
func (p *Process) logTail() string {
	const maxBytes = 16 << 10
	const maxLines = 40
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > maxBytes {
		_, _ = f.Seek(-maxBytes, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
