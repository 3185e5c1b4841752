package testserver

import (
	"bufio"
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

// DialedBy returns the index in procs of the process that holds the other
// end of c, a TCP connection that a listener of the test accepted (the
// process that dialed it), or -1 if none does. The socket is found in
// /proc/net/tcp (or tcp6) by its two addresses, then among the processes'
// descriptors. Linux only: elsewhere it returns -1.
func DialedBy(c net.Conn, procs ...*Process) int {
	inode := tcpInode(c.RemoteAddr(), c.LocalAddr())
	if inode == "" {
		return -1
	}
	want := "socket:[" + inode + "]"
	for i, p := range procs {
		pid := p.Pid()
		if pid == 0 {
			continue
		}
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(dir + "/" + fd.Name()); err == nil && l == want {
				return i
			}
		}
	}
	return -1
}

// tcpInode returns the inode of the TCP socket bound to local and
// connected to remote, from /proc/net/tcp or /proc/net/tcp6 (where an
// IPv6 socket connected to an IPv4 address lists it mapped), or "".
func tcpInode(local, remote net.Addr) string {
	l, ok1 := local.(*net.TCPAddr)
	r, ok2 := remote.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return ""
	}
	if l.IP.To4() != nil && r.IP.To4() != nil {
		if inode := procTCPInode("/proc/net/tcp", procTCPAddr(l.IP.To4(), l.Port), procTCPAddr(r.IP.To4(), r.Port)); inode != "" {
			return inode
		}
	}
	return procTCPInode("/proc/net/tcp6", procTCPAddr(l.IP.To16(), l.Port), procTCPAddr(r.IP.To16(), r.Port))
}

// procTCPInode returns the inode of the socket of file (/proc/net/tcp or
// tcp6) with addresses local and remote, as procTCPAddr writes them.
func procTCPInode(file, local, remote string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
	want := " " + local + " " + remote + " "
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, want) {
			if fields := strings.Fields(line); len(fields) > 9 {
				return fields[9]
			}
		}
	}
	return ""
}

// procTCPAddr writes ip (4 or 16 bytes) and port as /proc/net/tcp and
// tcp6 do: the address's bytes read as 32-bit words in the host's order,
// each in hex, a colon and the port.
func procTCPAddr(ip net.IP, port int) string {
	var b strings.Builder
	for i := 0; i+4 <= len(ip); i += 4 {
		fmt.Fprintf(&b, "%08X", binary.NativeEndian.Uint32(ip[i:i+4]))
	}
	fmt.Fprintf(&b, ":%04X", port)
	return b.String()
}
