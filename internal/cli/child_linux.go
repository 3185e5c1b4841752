package cli

import (
	"runtime"
	"syscall"
)

// childAttr makes the kernel SIGKILL the command when distlock dies, however
// it dies: a command left running would run without the lock. SIGKILL, not
// SIGTERM, because with the lock gone another holder may start at once.
// Processes the command started in the background are not covered.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func lockThread()   { runtime.LockOSThread() }
func unlockThread() { runtime.UnlockOSThread() }
