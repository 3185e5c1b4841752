//go:build unix

package supervisor

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/cli/standby"
)

// The supervisor is distlock run again as
//
//	distlock __supervise PPID
//
// by `distlock run` (PPID), with the write end of a pipe as descriptor
// reportFD and its end of a control socket (AF_UNIX, SOCK_STREAM) as
// controlFD, and only the Go runtime's settings in its environment. It
// may be started before the lock is acquired (see package standby): it
// first waits on the socket for the start message (StartMsg): the MODE,
// the command (PATH, ARGV), the command's environment and, if MODE has
// "lock", a descriptor of the file:// lock file. If the socket closes
// first, it exits at once and starts nothing. Then it starts the command
// as the leader of a new process group, made the foreground group of the
// terminal on its standard stream N if MODE has "fgN", and reports on the
// pipe, one line each:
//
//	pid N           the command runs, as process (and group) N
//	stop SIG        the command was stopped by SIG (with "fgN" only)
//	expired GRACE   the lock's deadline came within GRACE (ns) without a
//	                newer one: the group got SIGTERM, and SIGKILL follows
//	                at the deadline
//	exit CODE       the command exited with CODE
//	signal SIG      the command was killed by SIG
//	error CODE MSG  the command could not be started; exit with CODE
//
// distlock writes on the control socket, after the start message and then
// after each renewal, one line each:
//
//	deadline TERM KILL  the lock's local deadline: send the group SIGTERM
//	                    at TERM and SIGKILL at KILL unless a later line
//	                    comes first (ns on the monotonic clock, which
//	                    both processes share)
//	none                the lock has no time bound (first line only)
//	lost KILL           the lock was lost: send the group SIGTERM now,
//	                    unless it was sent already, and SIGKILL at KILL
//	                    or at the deadline, whichever comes first
//
// The supervisor keeps the deadline itself, so that the command ends in
// time even when distlock alone is stopped or starved. Once it has sent
// SIGTERM it goes on to SIGKILL at that deadline whatever distlock says,
// or sooner after "lost". The group gets one SIGTERM from the two: distlock
// leaves it to the supervisor when the lock is lost, rather than send one
// as the supervisor sends its own at the deadline.
//
// It reports the end of the command only after it has killed (SIGKILL)
// what was left of the command's group and seen it gone. If distlock dies
// first, it kills the group, waits for it to be gone, and exits: in mode
// "lock" it has kept the flock held until then. It ignores signals sent to
// itself while distlock lives (send them to distlock, which forwards them
// to the command's group).
const (
	reportFD  = standby.ReportFD
	controlFD = standby.ControlFD

	ModeForeground = "fg"
	ModeLockFile   = "lock"

	ReportPid    = "pid"
	ReportStop   = "stop"
	ReportExpiry = "expired"
	ReportExit   = "exit"
	ReportSignal = "signal"
	ReportError  = "error"
)

// Main is the supervisor's main; args follow standby.Command. It returns
// the supervisor's exit status.
func Main(args []string) int {
	var ppid int
	var err error
	if len(args) == 1 {
		ppid, err = strconv.Atoi(args[0])
	}
	if len(args) != 1 || err != nil || ppid < 1 || !isPipe(reportFD) || !isSocket(controlFD) {
		fmt.Fprintf(os.Stderr, "distlock: %s is started by distlock run, not by hand\n", standby.Command)
		return ExitUsage
	}
	// Neither descriptor goes to the command, nor does the lock file's,
	// which is never touched: it only has to stay open until this process
	// exits.
	syscall.CloseOnExec(reportFD)
	syscall.CloseOnExec(controlFD)
	report := os.NewFile(reportFD, "report")
	start, rest, err := recvStart(controlFD)
	switch {
	case errors.Is(err, errNoStart):
		return 0 // not needed: the lock was not acquired, or distlock ended
	case err != nil:
		fmt.Fprintf(report, "%s %d the supervisor got no command from distlock: %s\n", ReportError, ExitSoftware, strings.ReplaceAll(err.Error(), "\n", " "))
		return 0
	}
	mode, path, argv := strings.Split(start.Mode, ","), start.Path, start.Argv
	fg, ctty := false, 0
	for _, m := range mode {
		if n, ok := strings.CutPrefix(m, ModeForeground); ok {
			ctty, err = strconv.Atoi(n)
			fg = err == nil && ctty >= 0 && ctty <= 2
		}
	}

	deadlines := bufio.NewScanner(io.MultiReader(bytes.NewReader(rest), os.NewFile(controlFD, "deadlines")))
	limit, ok := nextDeadline(deadlines)
	if !ok {
		fmt.Fprintf(report, "%s %d the supervisor got no deadline from distlock\n", ReportError, ExitSoftware)
		return 0
	}
	if limit.Bounded() && MonoNow() >= limit.Kill {
		fmt.Fprintf(report, "%s %d the lock's deadline passed before the command started\n", ReportError, ExitLockLost)
		return 0
	}

	parentGone := watchParent(ppid)
	if os.Getppid() != ppid {
		return 1 // distlock died before the watch began: start nothing
	}
	becomeSubreaper()

	attr := &syscall.SysProcAttr{Setpgid: true}
	if fg {
		attr.Foreground, attr.Ctty = true, ctty
	}
	// syscall.ForkExec, not os.StartProcess: the command is waited for by
	// its pid (Wait4, below), and os.StartProcess would first probe
	// whether pidfds work, with a fork of its own, in every run.
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: start.Env, Files: []uintptr{0, 1, 2}, Sys: attr})
	if err != nil {
		code, err := ExecError(argv[0], &os.PathError{Op: "fork/exec", Path: path, Err: err})
		fmt.Fprintf(report, "%s %d %s\n", ReportError, code, strings.ReplaceAll(err.Error(), "\n", " "))
		return 0
	}
	fmt.Fprintf(report, "%s %d\n", ReportPid, pid)

	type end struct {
		ws syscall.WaitStatus
		ok bool
	}
	ended, stops := make(chan end, 1), make(chan syscall.Signal, 1)
	go func() {
		opts := 0
		if fg {
			opts = syscall.WUNTRACED
		}
		for {
			var ws syscall.WaitStatus
			_, err := syscall.Wait4(pid, &ws, opts, nil)
			switch {
			case err == syscall.EINTR:
				continue
			case err == nil && ws.Stopped():
				select {
				case stops <- ws.StopSignal():
				default:
				}
				continue
			}
			ended <- end{ws, err == nil}
			return
		}
	}()
	updates := make(chan control)
	go func() {
		defer close(updates)
		for {
			c, ok := nextControl(deadlines)
			if !ok {
				return // distlock closed its end, or died: keep the last deadline
			}
			updates <- c
		}
	}()
	var (
		timer       *time.Timer
		fire        <-chan time.Time
		terminating bool
	)
	// arm sets the timer to the next step of the deadline: SIGTERM, or,
	// once that was sent, SIGKILL.
	arm := func() {
		if timer != nil {
			timer.Stop()
			fire = nil
		}
		if !limit.Bounded() {
			return
		}
		at := limit.Term
		if terminating {
			at = limit.Kill
		}
		timer = time.NewTimer(time.Duration(at - MonoNow()))
		fire = timer.C
	}
	// terminate sends the group SIGTERM, and SIGCONT, which lets a
	// stopped job handle it; SIGKILL follows at limit.Kill.
	terminate := func() {
		terminating = true
		syscall.Kill(-pid, syscall.SIGTERM)
		syscall.Kill(-pid, syscall.SIGCONT)
	}
	arm()
	for {
		select {
		case c, ok := <-updates:
			switch {
			case !ok:
				updates = nil
			case c.lost:
				// Whether or not the deadline sent its SIGTERM already,
				// the group gets no other.
				if !limit.Bounded() || c.limit.Kill < limit.Kill {
					limit.Kill = c.limit.Kill
				}
				if !terminating {
					terminate()
				}
				arm()
			case !terminating:
				limit = c.limit
				arm()
			}
		case <-fire:
			fire = nil
			if !terminating {
				// The renewal is overdue: end the group before the lease
				// can lapse.
				terminate()
				fmt.Fprintf(report, "%s %d\n", ReportExpiry, limit.Kill-limit.Term)
				arm()
			} else {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		case <-parentGone:
			KillGroup(pid, true, io.Discard)
			return 1
		case s := <-stops:
			fmt.Fprintf(report, "%s %d\n", ReportStop, int(s))
		case e := <-ended:
			KillGroup(pid, true, os.Stderr)
			switch {
			case !e.ok:
			case e.ws.Signaled():
				fmt.Fprintf(report, "%s %d\n", ReportSignal, int(e.ws.Signal()))
			default:
				fmt.Fprintf(report, "%s %d\n", ReportExit, e.ws.ExitStatus())
			}
			return 0
		}
	}
}

// isPipe reports whether descriptor fd is a pipe.
func isPipe(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFIFO
}

// Deadline is when the supervisor ends the command unless it hears of a
// later one: SIGTERM at Term, SIGKILL at Kill (MonoNow's clock). Zero
// Kill: no bound.
type Deadline struct{ Term, Kill int64 }

// Bounded reports whether d bounds the command's time.
func (d Deadline) Bounded() bool { return d.Kill != 0 }

const (
	deadlineLine  = "deadline"
	unboundedLine = "none"
	lostLine      = "lost"
)

// LostLine is what distlock writes on the control socket when the lock is
// lost: the supervisor sends the group SIGTERM, unless it did already,
// and SIGKILL at kill (MonoNow's clock), or at the deadline if sooner.
func LostLine(kill int64) string {
	return fmt.Sprintf("%s %d\n", lostLine, kill)
}

// control is a line of the control socket after the start message: a
// deadline, or the lock's loss with the time for SIGKILL in limit.Kill.
type control struct {
	limit Deadline
	lost  bool
}

// nextControl reads the next well-formed line of the control socket;
// false at its end.
func nextControl(sc *bufio.Scanner) (control, bool) {
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == lostLine {
			if kill, err := strconv.ParseInt(f[1], 10, 64); err == nil && kill > 0 {
				return control{limit: Deadline{Kill: kill}, lost: true}, true
			}
			continue
		}
		if d, ok := parseDeadline(f); ok {
			return control{limit: d}, true
		}
	}
	return control{}, false
}

// Line is what distlock writes on the control socket for d.
func (d Deadline) Line() string {
	if !d.Bounded() {
		return unboundedLine + "\n"
	}
	return fmt.Sprintf("%s %d %d\n", deadlineLine, d.Term, d.Kill)
}

// nextDeadline reads the next well-formed deadline line of the control
// socket (the first, sent with the start message); false at its end.
func nextDeadline(sc *bufio.Scanner) (Deadline, bool) {
	for sc.Scan() {
		if d, ok := parseDeadline(strings.Fields(sc.Text())); ok {
			return d, true
		}
	}
	return Deadline{}, false
}

// parseDeadline parses the fields of a deadline line, or of "none".
func parseDeadline(f []string) (Deadline, bool) {
	if len(f) == 1 && f[0] == unboundedLine {
		return Deadline{}, true
	}
	if len(f) != 3 || f[0] != deadlineLine {
		return Deadline{}, false
	}
	term, err1 := strconv.ParseInt(f[1], 10, 64)
	kill, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 == nil && err2 == nil && kill > 0 && term <= kill {
		return Deadline{term, kill}, true
	}
	return Deadline{}, false
}
