//go:build !linux

package torture

import (
	"errors"
	"syscall"
)

var errNotLinux = errors.New("torture: worker processes are paused with SIGSTOP and watched through /proc: Linux only")

func workerAttr() *syscall.SysProcAttr { return nil }

func stopProcess(int) error { return errNotLinux }

func continueProcess(int) error { return errNotLinux }
