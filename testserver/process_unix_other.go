//go:build unix && !linux

package testserver

import (
	"net"
	"syscall"
	"time"
)

// setPdeathsig is a no-op: parent-death signals exist only on Linux.
func setPdeathsig(*syscall.SysProcAttr) {}

// descendants is not implemented outside Linux; signals reach the process
// group only.
func descendants(int) []int { return nil }

func procGone(pid int) bool { return syscall.Kill(pid, 0) != nil }

// waitStopped does not wait: without /proc the state of a process is not
// visible.
func waitStopped(int, time.Time) error { return nil }

// DialedBy is not implemented outside Linux: it returns -1.
func DialedBy(net.Conn, ...*Process) int { return -1 }
