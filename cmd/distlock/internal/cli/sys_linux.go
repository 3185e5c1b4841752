package cli

import (
	"bytes"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/distlock/distlock/cmd/distlock/internal/cli/standby"
)

// parentDeathSignal is what the kernel sends the supervisor when the thread
// of distlock that started it ends. It is catchable, so that the
// supervisor can kill the command's group before it exits; before the
// supervisor catches it, its default action ends the supervisor, which
// has then started nothing.
const parentDeathSignal = standby.ParentDeathSignal

// recvFlags makes the descriptor of the lock file that the supervisor
// receives close-on-exec as it arrives.
const recvFlags = unix.MSG_CMSG_CLOEXEC

// supervisorAttr puts the supervisor in a process group of its own (signals
// for distlock's group, such as a shell's `kill %1`, are not meant for it)
// with a parent-death signal.
func supervisorAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: parentDeathSignal}
}

// selfExecutable is the running distlock, even if its file was replaced
// or removed since it started.
func selfExecutable() (string, error) {
	const self = "/proc/self/exe"
	if _, err := os.Stat(self); err != nil {
		return os.Executable()
	}
	return self, nil
}

func lockThread()   { runtime.LockOSThread() }
func unlockThread() { runtime.UnlockOSThread() }

// watchParent returns a channel closed when the process ppid, the
// supervisor's parent, has died. The parent-death signal may also come
// when only the parent's starting thread ended, or from anyone: a change
// of parent is what counts.
func watchParent(ppid int) <-chan struct{} {
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, parentDeathSignal)
	gone := make(chan struct{})
	go func() {
		for range sigc {
			if os.Getppid() != ppid {
				signal.Stop(sigc)
				close(gone)
				return
			}
		}
	}()
	return gone
}

// becomeSubreaper makes the command's orphaned descendants children of the
// supervisor, which can then reap them itself after killing them (an init
// process that does not reap, as in some containers, would leave them as
// zombies of the group).
func becomeSubreaper() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }

// groupWaitLimit bounds killGroup's wait; none on Linux, where /proc tells
// live processes from zombies.
const groupWaitLimit = 0 * time.Second

// groupLive reports whether process group pgid has a process, other than a
// zombie, that this process may signal.
func groupLive(pgid int) bool {
	if err := unix.Kill(-pgid, 0); err != nil {
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
		if state, pg, ok := procStat(pid); ok && pg == pgid && state != 'Z' && state != 'X' && unix.Kill(pid, 0) == nil {
			return true
		}
	}
	return false
}

// groupShared reports whether a process other than this one is in process
// group pgid.
func groupShared(pgid int) bool {
	self := os.Getpid()
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if state, pg, ok := procStat(pid); ok && pg == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// procStat returns the state and process group of process pid.
func procStat(pid int) (state byte, pgrp int, ok bool) {
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

// stopped reports whether process pid is stopped now.
func stopped(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && (state == 'T' || state == 't')
}

// stopSelf stops distlock with sig, as the command was stopped, and
// returns true once it has been continued (or at once if the kernel
// discarded the stop, as it does in an orphaned process group): the
// signal is sent to this very thread, which takes it before it returns.
func stopSelf(sig syscall.Signal) bool {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
	return true
}

// setForeground makes pgid the foreground process group of the terminal
// fd. distlock is in a background group at that time: SIGTTOU, which the
// kernel would send it, is blocked on this thread meanwhile (not ignored,
// which the command would inherit).
func setForeground(fd, pgid int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	addSignal(&set, syscall.SIGTTOU)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		return err
	}
	defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	return unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pgid)
}

func addSignal(set *unix.Sigset_t, sig syscall.Signal) {
	bits := uint(unsafe.Sizeof(set.Val[0])) * 8
	n := uint(sig) - 1
	set.Val[n/bits] |= 1 << (n % bits)
}

// dieOf ends the process with sig, as if sig had not been caught: default
// action, unblocked, sent to this thread. It returns if that did not end
// the process.
func dieOf(sig syscall.Signal) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	signal.Reset(sig)
	// struct sigaction all zero: SIG_DFL, no flags, empty mask. The
	// runtime keeps its own handler for some signals after Reset.
	var act [8]uint64
	if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); errno != 0 {
		return
	}
	var set unix.Sigset_t
	addSignal(&set, sig)
	unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
}
