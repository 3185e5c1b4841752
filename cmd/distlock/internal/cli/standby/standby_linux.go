package standby

import (
	"os"
	"runtime"
	"strings"
	"syscall"
)

// ParentDeathSignal is what the kernel sends a supervisor when the thread
// of distlock that started it ends (the CLI catches it in the supervisor).
const ParentDeathSignal = syscall.SIGTERM

// StartAtInit starts the standby supervisor that Take returns, if args
// (without the program name) look like `distlock [global flags] run ...`.
// It is meant for a package's init. It returns at once: the start (a
// fork and exec of a large binary) takes place on a thread of its own,
// while the packages after the caller initialise on this one. That thread
// never exits (its goroutine stays locked to it, waiting forever), so the
// parent-death signal comes when distlock does. A wrong guess costs a
// standby that exits unused, or a supervisor started later. The fork may
// come while later packages initialise: a descriptor one of them opens
// without close-on-exec, or a signal one of them ignores, may reach the
// standby (the standard library's inits do neither).
func StartAtInit(args []string) {
	if !asksForRun(args) {
		return
	}
	started := make(chan struct{})
	mu.Lock()
	starting = started
	mu.Unlock()
	// Read now, before the packages after the caller initialise: one of
	// them could set them while the goroutine reads them.
	stdio := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as distlock
		s, err := Start("/proc/self/exe", stdio)
		if err == nil { // else distlock starts its supervisor later, and reports any failure then
			mu.Lock()
			waiting = s
			mu.Unlock()
		}
		close(started)
		select {}
	}()
}

// asksForRun reports whether args look like a run command.
func asksForRun(args []string) bool {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "run":
			return true
		case a == "--backend":
			i++ // its value
		case strings.HasPrefix(a, "-") && a != "-" && a != "--":
		default:
			return false
		}
	}
	return false
}

// Start starts exe as a supervisor waiting on its control socket, with
// stdio as its standard streams, in a process group of its own and with
// ParentDeathSignal. Its environment is the Go runtime's settings alone
// (RuntimeEnv): distlock's may hold the lock service's password, and the
// command's comes over the socket.
func Start(exe string, stdio []*os.File) (*Supervisor, error) {
	s, child, pw, err := Pipes()
	if err != nil {
		return nil, err
	}
	defer child.Close()
	defer pw.Close()
	files := append(append([]*os.File(nil), stdio...), pw, child)
	proc, err := os.StartProcess(exe, Args(), &os.ProcAttr{
		Env:   RuntimeEnv(os.Environ()),
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: ParentDeathSignal},
	})
	if err != nil {
		s.Report.Close()
		s.Control.Close()
		return nil, err
	}
	s.Proc = proc
	return s, nil
}
