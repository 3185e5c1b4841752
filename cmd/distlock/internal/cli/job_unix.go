//go:build unix

package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/cli/standby"
	"github.com/distlock/distlock/cmd/distlock/internal/cli/supervisor"
	"github.com/distlock/distlock/driver"
)

// waitSignals end the wait for the lock (they would end distlock).
var waitSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM}

// forwardSignals are passed on to the command's process group while it
// runs: every signal that someone may send on purpose. Left out: SIGKILL
// and SIGSTOP (they cannot be caught), SIGCHLD, SIGPIPE and SIGURG (they
// concern distlock itself, or its runtime), SIGPROF, SIGXCPU, SIGXFSZ and
// the fault signals (distlock's own), and the job control stops SIGTSTP,
// SIGTTIN and SIGTTOU. When the command's group has the terminal, those
// reach it directly and distlock follows the command's stops (suspend);
// SIGTSTP sent to distlock then stops distlock alone. Otherwise SIGTSTP
// to distlock (Ctrl-Z, when distlock's group has the terminal) is relayed
// to the group and stops distlock too; SIGTTIN and SIGTTOU are about
// distlock's own use of the terminal and stop it alone.
var forwardSignals = []os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGVTALRM,
	syscall.SIGWINCH, syscall.SIGCONT,
}

func runSupported() error { return nil }

// dyingSignal returns s if distlock should die of it when it ended the
// command or the wait: a signal that kills by default and that distlock
// did not inherit as ignored.
func dyingSignal(s os.Signal) syscall.Signal {
	switch s {
	case syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM:
		if !signal.Ignored(s) {
			return s.(syscall.Signal)
		}
	}
	return 0
}

// supervise runs the command while the lock is held and releases the lock
// on every path, after the command's process group is gone.
func (r *runner) supervise(ctx context.Context, lock held, b driver.Backend, argv []string, f runFlags, sigc chan os.Signal) error {
	key, what := lock.Key(), lock.describe()
	released := false
	release := func() error {
		released = true
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		return lock.Release(rctx)
	}
	defer func() {
		if !released {
			release()
		}
	}()

	resolved := exec.Command(argv[0], argv[1:]...)
	if resolved.Err != nil {
		return execError(argv[0], resolved.Err)
	}
	if !f.unit {
		notify(sigc, forwardSignals)
	}
	slot := -1
	if s, ok := lock.(interface{ Slot() (int, bool) }); ok {
		if n, ok := s.Slot(); ok {
			slot = n
		}
	}
	var extra []string
	if e, ok := lock.(interface{ env() []string }); ok {
		extra = e.env()
	}
	env, passed := commandEnv(os.Environ(), r.backendURL, key, lock.Token(), slot, extra...)
	if !passed && !f.unit { // partition says it once
		fmt.Fprintf(r.stderr, "distlock: the command gets no DISTLOCK_BACKEND: %s cannot be passed on without its password; a distlock inside the command uses file:// unless given --backend\n",
			redact(r.backendURL))
	}
	spec := jobSpec{
		path:    resolved.Path,
		argv:    argv,
		env:     env,
		noStdin: f.unit,
	}
	if !f.unit {
		// The commands of partition's units share distlock's streams:
		// none of them gets the terminal.
		spec.tty = foregroundTerminal(r.stdin, r.stdout, r.stderr)
	}
	if spec.tty != nil && groupShared(spec.tty.pgrp) {
		// A pipeline (cmd | less) or a shell without job control (a
		// script) shares distlock's group: the terminal stays with that
		// group, which gets what is typed; distlock forwards it.
		r.log.Debug("the terminal stays with distlock's process group, which other processes share")
		spec.tty = nil
	}
	if spec.tty == nil && !f.unit {
		// No job control of the command's group through the terminal:
		// SIGTSTP to distlock suspends the job.
		notify(sigc, []os.Signal{syscall.SIGTSTP})
	}
	if lf, err := lockFile(b, lock); err != nil {
		r.log.Debug("the lock file stays with distlock alone", "err", err)
	} else {
		spec.lockFile = lf
	}
	spec.limit = supervisorDeadline(lock, f)
	j, err := r.startJob(spec)
	if err != nil {
		return err
	}
	stopDeadlines := r.sendDeadlines(lock, j, spec.limit, f)
	r.log.Debug("command started", "pid", j.pid, "supervisor", j.supPid, "key", key, "token", lock.Token(),
		"terminal", spec.tty != nil, "lock_file_shared", spec.lockFile != nil)

	var (
		lost     = lock.Done()
		stopping = ctx.Done()
		killer   *time.Timer
		killC    <-chan time.Time
		lostErr  error
		sent     string // the signals distlock sent the group because the lock was lost
	)
	signalGroup := func(s syscall.Signal) {
		if err := syscall.Kill(-j.pid, s); err != nil {
			r.log.Debug("signalling the command's process group", "pgid", j.pid, "signal", s, "err", err)
		}
	}
	terminate := func() {
		signalGroup(syscall.SIGTERM)
		if killer == nil {
			killer = time.NewTimer(f.grace)
			killC = killer.C
		}
	}
loop:
	for {
		select {
		case <-j.done:
			break loop
		case s := <-sigc:
			sig := s.(syscall.Signal)
			r.log.Debug("forwarding signal", "signal", s, "pgid", j.pid)
			switch sig {
			case syscall.SIGCONT:
				r.resume(j, spec.tty)
			case syscall.SIGTSTP:
				// Suspend the job, then distlock (SIGSTOP: distlock catches
				// SIGTSTP), so that a shell sees the job stopped.
				signalGroup(sig)
				if stopSelf(syscall.SIGSTOP) {
					r.resume(j, spec.tty)
				}
			default:
				signalGroup(sig)
			}
		case s := <-j.stops:
			r.suspend(j, spec.tty, s)
		case <-lost:
			lost = nil
			lostErr = lock.Err()
			// Stop the command first: every moment it runs it runs unlocked.
			// What happened is said once, when the command has ended.
			// The supervisor sends the SIGTERM when it keeps a deadline:
			// it may have sent its own already (the deadline came near
			// before the Client gave the lock up), or be about to, and
			// the group gets one SIGTERM either way.
			if err := j.control(supervisor.LostLine(supervisor.MonoNow() + int64(f.grace))); err != nil {
				r.log.Debug("telling the supervisor the lock was lost", "err", err)
				signalGroup(syscall.SIGTERM)
			}
			if killer == nil {
				killer = time.NewTimer(f.grace)
				killC = killer.C
			}
			sent = "SIGTERM"
			r.log.Debug("terminating the command: the lock was lost", "pgid", j.pid, "grace", f.grace) // the Client logged why
		case <-stopping:
			stopping = nil
			terminate()
			r.log.Debug("stopping: terminating the command", "pgid", j.pid)
		case <-killC:
			killC = nil
			signalGroup(syscall.SIGKILL)
			if sent != "" {
				sent = fmt.Sprintf("SIGTERM, then SIGKILL after --grace %v", f.grace)
			}
			r.log.Debug("grace period over: killing the command's process group", "pgid", j.pid)
		}
	}
	stopDeadlines()
	if killer != nil {
		killer.Stop()
	}
	if spec.tty != nil {
		spec.tty.move(j.pid, spec.tty.pgrp)
	}

	var (
		status int
		how    string
		die    syscall.Signal
	)
	switch st := j.status; {
	case st == nil:
		// The supervisor died without saying how the command ended: what it
		// would have done is done here.
		supervisor.KillGroup(j.pid, false, r.stderr)
		status, how = ExitSoftware, fmt.Sprintf("ended in an unknown way (its supervisor %s)", describeState(j.supState))
	case st.sig != 0:
		status, die = ExitSignal+int(st.sig), dyingSignal(st.sig)
		how = fmt.Sprintf("was killed by signal %d (%v)", int(st.sig), st.sig)
	default:
		status, how = st.code, fmt.Sprintf("exited with status %d", st.code)
	}
	r.log.Debug("command ended", "pid", j.pid, "status", status, "how", how)
	if lostErr == nil {
		lostErr = lock.Err() // lost just as the command ended, or while distlock was stopped
	}
	switch {
	case j.expired != 0 && lostErr == nil:
		release()
		return &exitError{code: ExitLockLost, err: fmt.Errorf("%s came within %v of its deadline without a confirmed renewal: the supervisor sent the command SIGTERM, then SIGKILL at the deadline; the command %s",
			what, j.expired.Round(time.Millisecond), how)}
	case j.expired != 0:
		release()
		return &exitError{code: ExitLockLost, err: fmt.Errorf("lost %s while the command ran: %v; the supervisor sent the command SIGTERM %v before the lock's deadline, then SIGKILL at it; the command %s",
			what, lostErr, j.expired.Round(time.Millisecond), how)}
	case lostErr != nil && sent != "":
		release()
		return &exitError{code: ExitLockLost, err: fmt.Errorf("lost %s while the command ran: %v; the command was sent %s and %s", what, lostErr, sent, how)}
	case lostErr != nil:
		release()
		return &exitError{code: ExitLockLost, err: fmt.Errorf("lost %s while the command ran: %v; the command %s", what, lostErr, how)}
	}
	if err := release(); err != nil {
		if errors.Is(err, distlock.ErrLockLost) {
			return &exitError{code: ExitLockLost, err: fmt.Errorf("%s had been lost when the command ended (%v); the command %s", what, err, how)}
		}
		fmt.Fprintf(r.stderr, "distlock: warning: releasing %s: %v\n", what, err)
	}
	if j.status == nil {
		return &exitError{code: ExitSoftware, err: fmt.Errorf("the command %s; its process group was killed", how)}
	}
	return &exitError{code: status, sig: die}
}

// suspend follows a stop of the command (Ctrl-Z at the terminal, or a read
// from it in the background) as a shell's job control expects: distlock
// takes the terminal back and stops with the same signal, so that the
// shell sees its job stopped; when continued, it gives the terminal back
// and continues the command (resume). While distlock is stopped it renews
// nothing: on a TTL backend a stop longer than the TTL loses the lock.
func (r *runner) suspend(j *job, tty *terminal, sig syscall.Signal) {
	if tty == nil || !stopped(j.pid) {
		return // a stop report that a continue overtook
	}
	r.log.Debug("the command stopped: stopping too", "signal", sig)
	tty.move(j.pid, tty.pgrp)
	if stopSelf(sig) {
		r.resume(j, tty)
	}
}

// resume continues the command's group, giving it the terminal first if
// distlock has it (after `fg`, not after `bg`).
func (r *runner) resume(j *job, tty *terminal) {
	if tty != nil {
		tty.move(tty.pgrp, j.pid)
	}
	syscall.Kill(-j.pid, syscall.SIGCONT)
}

// jobSpec describes the command to start.
type jobSpec struct {
	path     string   // the command, resolved in PATH
	argv     []string // its arguments, argv[0] included
	env      []string
	tty      *terminal           // non-nil: the command's group gets the terminal
	lockFile *os.File            // non-nil: handed to the supervisor, and closed
	limit    supervisor.Deadline // the supervisor's first deadline
	// noStdin: the command's standard input is /dev/null (partition's
	// commands, which run at once and would share distlock's).
	noStdin bool
}

// job is the command, run by its supervisor in a process group of its own.
type job struct {
	supPid int                 // the supervisor's pid
	pid    int                 // the command's pid, which is its process group id
	stops  chan syscall.Signal // the command was stopped by this signal
	exited chan struct{}       // closed when the supervisor has exited and been waited for
	done   chan struct{}       // closed when the supervisor has exited and been read
	limits *os.File            // distlock's end of the supervisor's control socket
	ctlMu  sync.Mutex          // one line at a time on limits

	// Set before done is closed.
	supState *os.ProcessState // how the supervisor ended
	status   *cmdStatus       // nil if the supervisor did not report the command's end
	err      error            // the supervisor could not start the command
	expired  time.Duration    // non-zero: the supervisor ended the command this long before the lock's deadline
}

// cmdStatus is how the command ended: exit code, or the signal that
// killed it.
type cmdStatus struct {
	code int
	sig  syscall.Signal
}

// startJob starts the command through its supervisor, which distlock
// started at init (see package standby) or starts now, and returns once
// the command runs.
func (r *runner) startJob(spec jobSpec) (*job, error) {
	if spec.lockFile != nil {
		defer spec.lockFile.Close()
	}
	failed := func(err error) error {
		return &exitError{code: ExitSoftware, err: fmt.Errorf("cannot start the supervisor of the command: %w", err)}
	}
	mode := []string{"-"}
	if spec.tty != nil {
		mode = append(mode, supervisor.ModeForeground+strconv.Itoa(spec.tty.stdio))
	}
	if spec.lockFile != nil {
		mode = append(mode, supervisor.ModeLockFile)
	}
	// The first deadline follows the start message (sendStart): the
	// supervisor reads it before it starts the command.
	msg := supervisor.StartMsg{Mode: strings.Join(mode, ","), Path: spec.path, Argv: spec.argv, Env: spec.env, LockFile: spec.lockFile}
	j := &job{stops: make(chan syscall.Signal, 1), done: make(chan struct{})}
	var sendErr error
	var sup *standby.Supervisor
	if !spec.noStdin {
		sup = r.takeStandby(j)
	}
	if sup != nil {
		if sendErr = supervisor.SendStart(sup.Control, msg, spec.limit); sendErr != nil {
			// It died while distlock waited for the lock (someone killed
			// it): another one does its work.
			r.log.Debug("the supervisor started early is gone; starting another", "pid", j.supPid, "err", sendErr)
			sup.Control.Close()
			sup.Report.Close()
			<-j.exited
			sup = nil
		}
	}
	if sup == nil {
		var err error
		if sup, err = r.startSupervisor(j, spec.noStdin); err != nil {
			return nil, failed(err)
		}
		sendErr = supervisor.SendStart(sup.Control, msg, spec.limit)
	}
	j.limits = sup.Control
	if sendErr != nil {
		sup.Control.Close() // the supervisor then exits, having started nothing
	}
	started, read := make(chan int, 1), make(chan struct{})
	go j.read(sup.Report, started, read)
	go func() {
		<-j.exited
		<-read
		close(j.done)
	}()
	pid, ok := <-started
	if !ok {
		<-j.done
		if sendErr == nil {
			sup.Control.Close()
		}
		if j.err != nil {
			return nil, j.err
		}
		if sendErr != nil {
			return nil, failed(sendErr)
		}
		return nil, failed(fmt.Errorf("it %s", describeState(j.supState)))
	}
	j.pid = pid
	return j, nil
}

// takeStandby returns the supervisor started at init, if there is one and
// this run has the process's own standard streams (which it was given),
// with a goroutine that waits for it; nil otherwise.
func (r *runner) takeStandby(j *job) *standby.Supervisor {
	if r.stdin != os.Stdin || r.stdout != os.Stdout || r.stderr != os.Stderr {
		return nil
	}
	sup := standby.Take()
	if sup == nil {
		return nil
	}
	j.supPid = sup.Proc.Pid
	j.exited = make(chan struct{})
	go func() {
		defer close(j.exited)
		j.supState, _ = sup.Proc.Wait()
	}()
	return sup
}

// startSupervisor starts a supervisor now, with a goroutine that waits
// for it; with noStdin, its standard input (and the command's) is
// /dev/null.
func (r *runner) startSupervisor(j *job, noStdin bool) (*standby.Supervisor, error) {
	exe, err := selfExecutable()
	if err != nil {
		return nil, err
	}
	sup, child, pw, err := standby.Pipes()
	if err != nil {
		return nil, err
	}
	args := standby.Args()
	cmd := exec.Command(exe, args[1:]...)
	cmd.Args[0] = args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.stdin, r.stdout, r.stderr
	if noStdin {
		cmd.Stdin = nil // os/exec: the null device
	}
	cmd.Env = standby.RuntimeEnv(os.Environ())
	cmd.ExtraFiles = []*os.File{pw, child} // standby.ReportFD, standby.ControlFD
	cmd.SysProcAttr = supervisorAttr()
	cmd.WaitDelay = time.Second // for pipes that processes which left the group keep open

	j.exited = make(chan struct{})
	startErr := make(chan error, 1)
	go func() {
		defer close(j.exited)
		// The supervisor's parent-death signal fires when the thread that
		// started it ends: this goroutine keeps its thread until the
		// supervisor has exited.
		lockThread()
		defer unlockThread()
		if err := cmd.Start(); err != nil {
			startErr <- err
			return
		}
		startErr <- nil
		cmd.Wait()
		j.supState = cmd.ProcessState
	}()
	err = <-startErr
	pw.Close()
	child.Close()
	if err != nil {
		<-j.exited
		sup.Report.Close()
		sup.Control.Close()
		return nil, err
	}
	j.supPid = cmd.Process.Pid
	return sup, nil
}

// read takes in the supervisor's reports until it exits.
func (j *job) read(rd *os.File, started chan<- int, done chan<- struct{}) {
	defer close(done)
	defer rd.Close()
	defer close(started)
	sc := bufio.NewScanner(rd)
	for sc.Scan() {
		verb, arg, _ := strings.Cut(sc.Text(), " ")
		first, rest, _ := strings.Cut(arg, " ")
		n, err := strconv.Atoi(first)
		if err != nil {
			continue
		}
		switch verb {
		case supervisor.ReportPid:
			started <- n
		case supervisor.ReportStop:
			select {
			case j.stops <- syscall.Signal(n):
			default:
			}
		case supervisor.ReportExpiry:
			j.expired = max(time.Duration(n), time.Nanosecond)
		case supervisor.ReportExit:
			j.status = &cmdStatus{code: n}
		case supervisor.ReportSignal:
			j.status = &cmdStatus{sig: syscall.Signal(n)}
		case supervisor.ReportError:
			j.err = &exitError{code: n, err: errors.New(rest)}
		}
	}
}

// control writes line on the supervisor's control socket. It fails once
// the socket is closed: the lock has no time bound (sendDeadlines), or the
// command has ended.
func (j *job) control(line string) error {
	j.ctlMu.Lock()
	defer j.ctlMu.Unlock()
	_, err := io.WriteString(j.limits, line)
	return err
}

func describeState(ps *os.ProcessState) string {
	if ps == nil {
		return "was not waited for"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("was killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ps.ExitCode())
}

// terminal is the controlling terminal of distlock, when distlock's
// process group is its foreground group: the command's group is then made
// the foreground group, so that what is typed (Ctrl-C, Ctrl-Z, input)
// goes to the command, once, and distlock's group gets the terminal back
// when the command ends.
type terminal struct {
	fd    int // a descriptor of it: one of distlock's standard streams
	stdio int // which one: 0, 1 or 2 (the command's supervisor has it there too)
	pgrp  int // distlock's process group
}

// foregroundTerminal returns the terminal of the first of distlock's
// standard streams that is a terminal whose foreground process group is
// distlock's, or nil. Streams that are not files (WithStdio) are not
// looked at.
func foregroundTerminal(stdio ...any) *terminal {
	for i, s := range stdio {
		f, ok := s.(*os.File)
		if !ok {
			continue
		}
		fd := int(f.Fd())
		if fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil && fg == unix.Getpgrp() {
			return &terminal{fd: fd, stdio: i, pgrp: fg}
		}
	}
	return nil
}

// move makes to the foreground group if from is.
func (t *terminal) move(from, to int) {
	if fg, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP); err == nil && fg == from {
		setForeground(t.fd, to)
	}
}

// supervisorDeadline is what the supervisor is told of lock now: its
// local deadline, with SIGTERM before it, or no bound.
func supervisorDeadline(lock held, f runFlags) supervisor.Deadline {
	now := supervisor.MonoNow()
	d, w, ok := lock.RiskWindow()
	if !ok {
		if lock.Err() != nil {
			return supervisor.Deadline{Term: now, Kill: now} // ended already
		}
		return supervisor.Deadline{}
	}
	return limitAt(now, d, w, f)
}

// limitAt converts d, read from the lock after now (monoNow), with its
// at-risk window w, to the supervisor's clock: SIGKILL at d, SIGTERM --grace
// before it, but no earlier than the window's start. The Client keeps d
// and w from the lease the service confirmed (5/12 of a ZooKeeper session
// timeout, whatever --ttl is) and sends each renewal at least two windows before d,
// so that a renewal that is merely on time never meets a SIGTERM; a
// SIGTERM further ahead would come before a renewal is even late. A pause
// between the two readings only moves the result earlier.
func limitAt(now int64, d time.Time, w time.Duration, f runFlags) supervisor.Deadline {
	kill := now + int64(time.Until(d))
	return supervisor.Deadline{Term: kill - int64(min(f.grace, w)), Kill: kill}
}

// deadlinePoll is how often distlock looks for a renewed deadline to pass
// on to the supervisor, for a lock whose at-risk window is w: often enough
// that the supervisor's copy lags the lock's by a small part of the time
// a renewal has before the window.
func deadlinePoll(w time.Duration) time.Duration {
	return min(max(w/10, 10*time.Millisecond), 500*time.Millisecond)
}

// sendDeadlines passes each renewed deadline of lock on to j's supervisor
// until the returned stop is called, which also closes the pipe.
func (r *runner) sendDeadlines(lock held, j *job, first supervisor.Deadline, f runFlags) (stop func()) {
	if !first.Bounded() {
		// No time bound (file://, PostgreSQL's session locks): the
		// Client keeps none, and these backends confirm none later.
		j.limits.Close()
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		_, w, _ := lock.RiskWindow()
		t := time.NewTimer(deadlinePoll(w))
		defer t.Stop()
		var (
			last  time.Time // the first tick resends the first deadline, or a renewed one
			lastW time.Duration
		)
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			now := supervisor.MonoNow()
			d, w, ok := lock.RiskWindow()
			if !ok {
				return // ended: the supervisor keeps the last deadline, and distlock ends the job
			}
			t.Reset(deadlinePoll(w))
			if d.Equal(last) && w == lastW {
				continue
			}
			last, lastW = d, w
			if err := j.control(limitAt(now, d, w, f).Line()); err != nil {
				r.log.Debug("telling the supervisor the lock's deadline", "err", err)
				return
			}
		}
	}()
	return func() {
		close(quit)
		j.limits.Close() // also ends a write blocked on a full pipe
		<-done
	}
}
