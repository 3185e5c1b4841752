//go:build unix && !linux

package supervisor

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// recvFlags: the supervisor makes the descriptor of the lock file that it
// receives close-on-exec itself; it starts nothing meanwhile.
const recvFlags = 0

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

// MonoNow reads the monotonic clock, in ns; unlike the monotonic reading
// of a time.Time, it means the same in distlock and in its supervisor.
func MonoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// groupWaitLimit bounds KillGroup's wait: without /proc a zombie that no
// one reaps cannot be told from a live process.
const groupWaitLimit = 10 * time.Second

// groupLive reports whether process group pgid has a process that this
// process may signal.
func groupLive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }
