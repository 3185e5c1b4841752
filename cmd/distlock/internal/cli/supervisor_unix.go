//go:build unix

package cli

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

	"golang.org/x/sys/unix"

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
// first waits on the socket for the start message (startMsg): the MODE,
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

	modeForeground = "fg"
	modeLockFile   = "lock"

	reportPid    = "pid"
	reportStop   = "stop"
	reportExpiry = "expired"
	reportExit   = "exit"
	reportSignal = "signal"
	reportError  = "error"
)

// runSupervisor is the supervisor's main; args follow SupervisorCommand.
func runSupervisor(args []string) int {
	var ppid int
	var err error
	if len(args) == 1 {
		ppid, err = strconv.Atoi(args[0])
	}
	if len(args) != 1 || err != nil || ppid < 1 || !isPipe(reportFD) || !isSocket(controlFD) {
		fmt.Fprintf(os.Stderr, "distlock: %s is started by distlock run, not by hand\n", SupervisorCommand)
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
		fmt.Fprintf(report, "%s %d the supervisor got no command from distlock: %s\n", reportError, ExitSoftware, strings.ReplaceAll(err.Error(), "\n", " "))
		return 0
	}
	mode, path, argv := strings.Split(start.mode, ","), start.path, start.argv
	fg, ctty := false, 0
	for _, m := range mode {
		if n, ok := strings.CutPrefix(m, modeForeground); ok {
			ctty, err = strconv.Atoi(n)
			fg = err == nil && ctty >= 0 && ctty <= 2
		}
	}

	deadlines := bufio.NewScanner(io.MultiReader(bytes.NewReader(rest), os.NewFile(controlFD, "deadlines")))
	limit, ok := nextDeadline(deadlines)
	if !ok {
		fmt.Fprintf(report, "%s %d the supervisor got no deadline from distlock\n", reportError, ExitSoftware)
		return 0
	}
	if limit.bounded() && monoNow() >= limit.kill {
		fmt.Fprintf(report, "%s %d the lock's deadline passed before the command started\n", reportError, ExitLockLost)
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
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{Env: start.env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: attr})
	if err != nil {
		ee := execError(argv[0], err).(*exitError)
		fmt.Fprintf(report, "%s %d %s\n", reportError, ee.code, strings.ReplaceAll(ee.err.Error(), "\n", " "))
		return 0
	}
	pid := proc.Pid
	defer proc.Release()
	fmt.Fprintf(report, "%s %d\n", reportPid, pid)

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
		if !limit.bounded() {
			return
		}
		at := limit.term
		if terminating {
			at = limit.kill
		}
		timer = time.NewTimer(time.Duration(at - monoNow()))
		fire = timer.C
	}
	// terminate sends the group SIGTERM, and SIGCONT, which lets a
	// stopped job handle it; SIGKILL follows at limit.kill.
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
				if !limit.bounded() || c.limit.kill < limit.kill {
					limit.kill = c.limit.kill
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
				fmt.Fprintf(report, "%s %d\n", reportExpiry, limit.kill-limit.term)
				arm()
			} else {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		case <-parentGone:
			killGroup(pid, true, io.Discard)
			return 1
		case s := <-stops:
			fmt.Fprintf(report, "%s %d\n", reportStop, int(s))
		case e := <-ended:
			killGroup(pid, true, os.Stderr)
			switch {
			case !e.ok:
			case e.ws.Signaled():
				fmt.Fprintf(report, "%s %d\n", reportSignal, int(e.ws.Signal()))
			default:
				fmt.Fprintf(report, "%s %d\n", reportExit, e.ws.ExitStatus())
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

// deadline is when the supervisor ends the command unless it hears of a
// later one: SIGTERM at term, SIGKILL at kill (monoNow's clock). Zero
// kill: no bound.
type deadline struct{ term, kill int64 }

func (d deadline) bounded() bool { return d.kill != 0 }

const (
	deadlineLine  = "deadline"
	unboundedLine = "none"
	lostLine      = "lost"
)

// lostMsg is what distlock writes on the control socket when the lock is
// lost: the supervisor sends the group SIGTERM, unless it did already,
// and SIGKILL at kill (monoNow's clock), or at the deadline if sooner.
func lostMsg(kill int64) string {
	return fmt.Sprintf("%s %d\n", lostLine, kill)
}

// control is a line of the control socket after the start message: a
// deadline, or the lock's loss with the time for SIGKILL in limit.kill.
type control struct {
	limit deadline
	lost  bool
}

// nextControl reads the next well-formed line of the control socket;
// false at its end.
func nextControl(sc *bufio.Scanner) (control, bool) {
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == lostLine {
			if kill, err := strconv.ParseInt(f[1], 10, 64); err == nil && kill > 0 {
				return control{limit: deadline{kill: kill}, lost: true}, true
			}
			continue
		}
		if d, ok := parseDeadline(f); ok {
			return control{limit: d}, true
		}
	}
	return control{}, false
}

// line is what distlock writes on the deadline pipe for d.
func (d deadline) line() string {
	if !d.bounded() {
		return unboundedLine + "\n"
	}
	return fmt.Sprintf("%s %d %d\n", deadlineLine, d.term, d.kill)
}

// nextDeadline reads the next well-formed deadline line of the control
// socket (the first, sent with the start message); false at its end.
func nextDeadline(sc *bufio.Scanner) (deadline, bool) {
	for sc.Scan() {
		if d, ok := parseDeadline(strings.Fields(sc.Text())); ok {
			return d, true
		}
	}
	return deadline{}, false
}

// parseDeadline parses the fields of a deadline line, or of "none".
func parseDeadline(f []string) (deadline, bool) {
	if len(f) == 1 && f[0] == unboundedLine {
		return deadline{}, true
	}
	if len(f) != 3 || f[0] != deadlineLine {
		return deadline{}, false
	}
	term, err1 := strconv.ParseInt(f[1], 10, 64)
	kill, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 == nil && err2 == nil && kill > 0 && term <= kill {
		return deadline{term, kill}, true
	}
	return deadline{}, false
}

// monoNow reads the monotonic clock, in ns; unlike the monotonic reading
// of a time.Time, it means the same in distlock and in its supervisor.
func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
