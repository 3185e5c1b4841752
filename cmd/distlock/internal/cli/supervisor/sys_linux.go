package supervisor

import (
	"bytes"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"github.com/distlock/distlock/cmd/distlock/internal/cli/standby"
)

// recvFlags makes the descriptor of the lock file that the supervisor
// receives close-on-exec as it arrives.
const recvFlags = syscall.MSG_CMSG_CLOEXEC

// watchParent returns a channel closed when the process ppid, the
// supervisor's parent, has died. The parent-death signal may also come
// when only the parent's starting thread ended, or from anyone: a change
// of parent is what counts.
//
// The signal stays caught for the rest of the supervisor's life. The
// kernel sends it each time a thread of distlock that is the
// supervisor's parent exits, so the death of a distlock of many threads
// sends it several times, and one may come after the one that showed the
// new parent: by default it would end the supervisor before it has
// killed the command's group, and free the lock file while the command
// runs on.
func watchParent(ppid int) <-chan struct{} {
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, standby.ParentDeathSignal) // never stopped: see above
	gone := make(chan struct{})
	go func() {
		for range sigc {
			if os.Getppid() != ppid {
				close(gone)
				return // later signals fill sigc, then are dropped
			}
		}
	}()
	return gone
}

// becomeSubreaper makes the command's orphaned descendants children of the
// supervisor, which can then reap them itself after killing them (an init
// process that does not reap, as in some containers, would leave them as
// zombies of the group).
func becomeSubreaper() {
	const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER
	syscall.RawSyscall6(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0, 0, 0, 0)
}

// MonoNow reads the monotonic clock, in ns; unlike the monotonic reading
// of a time.Time, it means the same in distlock and in its supervisor.
func MonoNow() int64 {
	const clockMonotonic = 1 // CLOCK_MONOTONIC
	var ts syscall.Timespec
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// groupWaitLimit bounds KillGroup's wait; none on Linux, where /proc tells
// live processes from zombies.
const groupWaitLimit = 0 * time.Second

// groupLive reports whether process group pgid has a process, other than a
// zombie, that this process may signal.
func groupLive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); err != nil {
		return false // ESRCH: none; EPERM: none that we may signal
	}
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return false // cannot tell: the group was sent SIGKILL
	}
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, pg, ok := ProcStat(pid); ok && pg == pgid && state != 'Z' && state != 'X' && syscall.Kill(pid, 0) == nil {
			return true
		}
	}
	return false
}

// ProcStat returns the state and process group of process pid.
func ProcStat(pid int) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid pgrp ...; comm may hold anything but ')' ends it last.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pgrp, err = strconv.Atoi(string(f[2]))
	return f[0][0], pgrp, err == nil
}
