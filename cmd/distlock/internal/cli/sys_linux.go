package cli

import (
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/distlock/distlock/cmd/distlock/internal/cli/standby"
	"github.com/distlock/distlock/cmd/distlock/internal/cli/supervisor"
)

// parentDeathSignal is what the kernel sends the supervisor when the thread
// of distlock that started it ends. It is catchable, so that the
// supervisor can kill the command's group before it exits; before the
// supervisor catches it, its default action ends the supervisor, which
// has then started nothing.
const parentDeathSignal = standby.ParentDeathSignal

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
		if state, pg, ok := supervisor.ProcStat(pid); ok && pg == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// stopped reports whether process pid is stopped now.
func stopped(pid int) bool {
	state, _, ok := supervisor.ProcStat(pid)
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
