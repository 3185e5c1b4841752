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
	"time"
)

// proc is one server process that can be started, signalled, stopped and
// started again with the same command line.
type proc struct {
	name    string   // for messages, e.g. "redis 127.0.0.1:1234"
	path    string   // executable
	args    []string // arguments
	dir     string   // working directory
	env     []string // nil: inherit
	logPath string   // stdout and stderr are appended here
	stopSig syscall.Signal
	runAs   *runAsUser // nil: current user

	mu  sync.Mutex
	cur *run // nil if never started
}

// run is one execution of a proc.
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

// start launches the process. It fails if it is already running.
func (p *proc) start() error {
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

func (p *proc) current() *run {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// running reports whether the process has been started and has not exited.
func (p *proc) running() bool {
	r := p.current()
	return r != nil && !r.exited()
}

// exitStatus reports whether the last run exited, and its Wait error.
func (p *proc) exitStatus() (exited bool, err error) {
	r := p.current()
	if r == nil || !r.exited() {
		return false, nil
	}
	if r.err == nil {
		return true, errors.New("exit status 0")
	}
	return true, r.err
}

// kill sends SIGKILL to the process group and waits for the process.
func (p *proc) kill() {
	r := p.current()
	if r == nil || r.exited() {
		return
	}
	kids := killTree(r.cmd.Process)
	<-r.done
	waitGone(kids)
}

// stop sends the stop signal and waits up to timeout for the process to exit;
// then it kills the process group and waits.
func (p *proc) stop(timeout time.Duration) {
	r := p.current()
	if r == nil || r.exited() {
		return
	}
	_ = r.cmd.Process.Signal(p.stopSig)
	// A paused process must run to handle the signal.
	signalGroup(r.cmd.Process, sigCont)
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

// shutdown is the cleanup action: graceful stop, then kill.
func (p *proc) shutdown() { p.stop(stopTimeout) }

// pause sends SIGSTOP to the process group.
func (p *proc) pause() error { return p.signalRunning(sigStop) }

// resume sends SIGCONT to the process group.
func (p *proc) resume() error { return p.signalRunning(sigCont) }

func (p *proc) signalRunning(sig os.Signal) error {
	r := p.current()
	if r == nil || r.exited() {
		return fmt.Errorf("%s is not running", p.name)
	}
	return signalGroup(r.cmd.Process, sig)
}

// pid returns the process id of the running process, or 0.
func (p *proc) pid() int {
	r := p.current()
	if r == nil || r.exited() {
		return 0
	}
	return r.cmd.Process.Pid
}

// logTail returns about the last 40 lines of the log file.
func (p *proc) logTail() string {
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
