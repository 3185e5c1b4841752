//go:build unix && !linux

package cli

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// supervisorAttr puts the supervisor in a process group of its own. There
// is no parent-death signal here: the supervisor polls its parent.
func supervisorAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func selfExecutable() (string, error) { return os.Executable() }

func lockThread()   {}
func unlockThread() {}

// groupShared cannot tell here (no /proc): distlock takes the terminal
// for the command whenever its group has it.
func groupShared(int) bool { return false }

// stopped cannot tell here: the supervisor's report is trusted.
func stopped(int) bool { return true }

// stopSelf stops distlock with sig. The stop takes effect shortly after;
// the continue that ends it is handled as any SIGCONT.
func stopSelf(sig syscall.Signal) bool {
	syscall.Kill(os.Getpid(), sig)
	return false
}

var ignoreTTOU sync.Once

// setForeground makes pgid the foreground process group of the terminal
// fd. distlock is in a background group then: SIGTTOU, which the kernel
// would send it, is ignored from now on. The command is started already
// and does not inherit that.
func setForeground(fd, pgid int) error {
	ignoreTTOU.Do(func() { signal.Ignore(syscall.SIGTTOU) })
	return unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, pgid)
}

// dieOf is not supported here: distlock exits with 128+n instead.
func dieOf(syscall.Signal) {}
