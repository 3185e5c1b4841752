//go:build unix && !linux

package cli

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// recvFlags: the supervisor makes the descriptor of the lock file that it
// receives close-on-exec itself; it starts nothing meanwhile.
const recvFlags = 0

// supervisorAttr puts the supervisor in a process group of its own. There
// is no parent-death signal here: the supervisor polls its parent.
func supervisorAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func selfExecutable() (string, error) { return os.Executable() }

func lockThread()   {}
func unlockThread() {}

// parentPoll is how often the supervisor checks that distlock lives.
const parentPoll = 100 * time.Millisecond

// watchParent returns a channel closed when the process ppid, the
// supervisor's parent, has died: the supervisor then has another parent.
func watchParent(ppid int) <-chan struct{} {
	gone := make(chan struct{})
	go func() {
		t := time.NewTicker(parentPoll)
		defer t.Stop()
		for range t.C {
			if os.Getppid() != ppid {
				close(gone)
				return
			}
		}
	}()
	return gone
}

func becomeSubreaper() {}

// groupWaitLimit bounds killGroup's wait: without /proc a zombie that no
// one reaps cannot be told from a live process.
const groupWaitLimit = 10 * time.Second

// groupLive reports whether process group pgid has a process that this
// process may signal.
func groupLive(pgid int) bool { return unix.Kill(-pgid, 0) == nil }

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
