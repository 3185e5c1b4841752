//go:build !linux

package cli

import "syscall"

// childAttr sets nothing: without a parent-death signal, a command whose
// distlock is killed with SIGKILL goes on running without the lock.
func childAttr() *syscall.SysProcAttr { return nil }

func lockThread()   {}
func unlockThread() {}
