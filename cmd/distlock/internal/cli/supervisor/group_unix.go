//go:build unix

package supervisor

import (
	"fmt"
	"io"
	"syscall"
	"time"
)

// KillGroup kills the process group pgid with SIGKILL and waits until none
// of its processes that distlock may signal is alive (zombies aside).
// With reap it also reaps the group's processes that are its children.
func KillGroup(pgid int, reap bool, warn io.Writer) {
	start := time.Now()
	delay := time.Millisecond
	warned := false
	for {
		syscall.Kill(-pgid, syscall.SIGKILL)
		if reap {
			reapGroup(pgid)
		}
		if !groupLive(pgid) {
			return
		}
		waited := time.Since(start)
		if groupWaitLimit > 0 && waited > groupWaitLimit {
			fmt.Fprintf(warn, "distlock: warning: processes of the command's group %d still exist %v after SIGKILL; going on\n", pgid, groupWaitLimit)
			return
		}
		if !warned && waited > 10*time.Second {
			warned = true
			fmt.Fprintf(warn, "distlock: processes of the command's group %d are still alive 10s after SIGKILL; waiting for them to end\n", pgid)
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// reapGroup reaps the processes of group pgid that have ended and are
// children of this process.
func reapGroup(pgid int) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}
