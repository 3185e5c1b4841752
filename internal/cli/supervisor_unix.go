//go:build unix

package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// The supervisor is distlock run again as
//
//	distlock __supervise PPID MODE PATH -- ARGV...
//
// by `distlock run` (PPID), with the write end of a pipe as descriptor
// reportFD and, if MODE has "lock", a descriptor of the file:// lock file
// as lockFD. It starts the command (PATH, ARGV) as the leader of a new
// process group, made the foreground group of the terminal on its standard
// stream N if MODE has "fgN", and reports on the pipe, one line each:
//
//	pid N           the command runs, as process (and group) N
//	stop SIG        the command was stopped by SIG (with "fgN" only)
//	exit CODE       the command exited with CODE
//	signal SIG      the command was killed by SIG
//	error CODE MSG  the command could not be started; exit with CODE
//
// It reports the end of the command only after it has killed (SIGKILL)
// what was left of the command's group and seen it gone. If distlock dies
// first, it kills the group, waits for it to be gone, and exits: in mode
// "lock" it has kept the flock held until then. It ignores signals sent to
// itself while distlock lives (send them to distlock, which forwards them
// to the command's group).
const (
	reportFD = 3
	lockFD   = 4

	modeForeground = "fg"
	modeLockFile   = "lock"

	reportPid    = "pid"
	reportStop   = "stop"
	reportExit   = "exit"
	reportSignal = "signal"
	reportError  = "error"
)

// runSupervisor is the supervisor's main; args follow SupervisorCommand.
func runSupervisor(args []string) int {
	var ppid int
	var err error
	if len(args) >= 5 && args[3] == "--" {
		ppid, err = strconv.Atoi(args[0])
	}
	var st syscall.Stat_t
	if len(args) < 5 || args[3] != "--" || err != nil || ppid < 1 ||
		syscall.Fstat(reportFD, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		fmt.Fprintf(os.Stderr, "distlock: %s is started by distlock run, not by hand\n", SupervisorCommand)
		return ExitUsage
	}
	mode, path, argv := strings.Split(args[1], ","), args[2], args[4:]
	hasLock, fg, ctty := slices.Contains(mode, modeLockFile), false, 0
	for _, m := range mode {
		if n, ok := strings.CutPrefix(m, modeForeground); ok {
			ctty, err = strconv.Atoi(n)
			fg = err == nil && ctty >= 0 && ctty <= 2
		}
	}

	// Neither descriptor goes to the command. The lock file's is never
	// touched: it only has to stay open until this process exits.
	syscall.CloseOnExec(reportFD)
	if hasLock {
		syscall.CloseOnExec(lockFD)
	}
	report := os.NewFile(reportFD, "report")

	parentGone := watchParent(ppid)
	if os.Getppid() != ppid {
		return 1 // distlock died before the watch began: start nothing
	}
	becomeSubreaper()

	attr := &syscall.SysProcAttr{Setpgid: true}
	if fg {
		attr.Foreground, attr.Ctty = true, ctty
	}
	proc, err := os.StartProcess(path, argv, &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: attr})
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
	for {
		select {
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
