package testserver

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// setPdeathsig makes the kernel SIGKILL the child when the test binary dies.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// descendants returns the pids of all live descendants of pid, read from
// /proc. Servers such as PostgreSQL put their children in sessions of their
// own, so signalling the process group does not reach them.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := procParent(p); ok {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// procStat returns the state and parent pid of pid from /proc/PID/stat.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// The command name is in parentheses and may contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], ppid, true
}

func procParent(pid int) (int, bool) {
	_, ppid, ok := procStat(pid)
	return ppid, ok
}

// procGone reports whether pid has exited (it no longer exists or is a
// zombie waiting for some other parent to reap it).
func procGone(pid int) bool {
	state, _, ok := procStat(pid)
	return !ok || state == 'Z' || state == 'X'
}

// waitStopped waits until pid and its descendants are stopped (or gone):
// a SIGSTOP is delivered asynchronously, and a server that still runs for
// a moment after Pause returned could answer a request the test expects to
// hang. The descendants are listed again at each check, and one found
// running is sent SIGSTOP again: a child that its parent forked while the
// first signals were on their way, in a session of its own (as
// PostgreSQL's backends are), was in no list and no group they reached.
// It returns once every process listed is stopped and a listing after
// those checks names no other.
func waitStopped(pid int, deadline time.Time) error {
	for {
		procs := append([]int{pid}, descendants(pid)...)
		running := 0
		for _, p := range procs {
			state, _, ok := procStat(p)
			if !ok || state == 'T' || state == 't' || state == 'Z' || state == 'X' {
				continue
			}
			running++
			_ = syscall.Kill(p, syscall.SIGSTOP)
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d not stopped (state %c)", p, state)
			}
		}
		// All stopped as checked; a process that forked between the
		// listing and its check shows its child in a new listing.
		if running == 0 && !slices.ContainsFunc(descendants(pid), func(p int) bool { return !slices.Contains(procs, p) }) {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
}
