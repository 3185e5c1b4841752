package testserver

import (
	"encoding/binary"
	"fmt"
	"net"
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

// Dialed reports whether the process holds the other end of c, a TCP
// connection that a listener of the test accepted: whether it dialed it.
// The socket is found in /proc/net/tcp (or tcp6) by its two addresses, and
// then among the process's descriptors.
func (p *Process) Dialed(c net.Conn) bool {
	pid := p.Pid()
	if pid == 0 {
		return false
	}
	inode := tcpInode(c.RemoteAddr(), c.LocalAddr())
	if inode == "" {
		return false
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := "socket:[" + inode + "]"
	for _, fd := range fds {
		if l, err := os.Readlink(dir + "/" + fd.Name()); err == nil && l == want {
			return true
		}
	}
	return false
}

// tcpInode returns the inode of the TCP socket bound to local and
// connected to remote, from /proc/net/tcp or /proc/net/tcp6, or "".
func tcpInode(local, remote net.Addr) string {
	l, ok1 := local.(*net.TCPAddr)
	r, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return ""
	}
	file, want := "/proc/net/tcp", [2]string{procTCPAddr(l), procTCPAddr(r)}
	if l.IP.To4() == nil {
		file = "/proc/net/tcp6"
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == want[0] && f[2] == want[1] {
			return f[9]
		}
	}
	return ""
}

// procTCPAddr writes a as /proc/net/tcp does: the address's bytes read as
// 32-bit words in the host's order, each in hex, a colon and the port.
func procTCPAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		ip = a.IP.To16()
	}
	var b strings.Builder
	for i := 0; i+4 <= len(ip); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(ip[i:i+4]))
	}
	fmt.Fprintf(&b, ":%04X", a.Port)
	return b.String()
}
