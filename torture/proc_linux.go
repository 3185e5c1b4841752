//go:build linux

package torture

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// workerAttr puts a worker in its own process group and makes it die with
// the harness.
func workerAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// stopProcess sends SIGSTOP to pid and waits until the kernel reports the
// process stopped, so that it can no longer run a single instruction.
func stopProcess(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := procState(pid)
		if err != nil {
			return err
		}
		if st == 'T' || st == 't' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped after 10s (state %c)", pid, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// continueProcess sends SIGCONT to pid.
func continueProcess(pid int) error { return syscall.Kill(pid, syscall.SIGCONT) }

// procState returns the state letter of /proc/pid/stat.
func procState(pid int) (byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// pid (comm) state ...; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return b[i+2], nil
}
