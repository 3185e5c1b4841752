//go:build unix

package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// startMsg is what distlock tells its supervisor to run, on the control
// socket (see runSupervisor), once the lock is held. It comes over the
// socket rather than in the supervisor's arguments and environment because
// the supervisor may have been started before the lock was acquired (see
// package standby), and because the command's environment is not the
// supervisor's.
//
// On the socket it is
//
//	start N\n
//
// followed by N bytes: MODE, PATH, the number of arguments, the
// arguments and then the environment, each ended by a NUL byte. In mode
// "lock" the first byte carries the descriptor of the lock file
// (SCM_RIGHTS). The deadline lines follow.
type startMsg struct {
	mode     string
	path     string
	argv     []string
	env      []string
	lockFile *os.File // sent: nil for none
	lockFD   int      // received: -1 for none
}

const startLine = "start"

// errNoStart: distlock closed the control socket without a start message
// (the lock was not acquired, or distlock started no command).
var errNoStart = errors.New("cli: the supervisor was told nothing to run")

// encode returns m on the wire.
func (m startMsg) encode() []byte {
	var p bytes.Buffer
	field := func(s string) {
		p.WriteString(s)
		p.WriteByte(0)
	}
	field(m.mode)
	field(m.path)
	field(strconv.Itoa(len(m.argv)))
	for _, a := range m.argv {
		field(a)
	}
	for _, kv := range m.env {
		field(kv)
	}
	return append(fmt.Appendf(nil, "%s %d\n", startLine, p.Len()), p.Bytes()...)
}

// sendStart writes m and then first, the first deadline, on ctrl, the
// non-blocking end of the control socket.
func sendStart(ctrl *os.File, m startMsg, first deadline) error {
	if strings.ContainsRune(m.mode, 0) || strings.ContainsRune(m.path, 0) {
		return fmt.Errorf("cli: a NUL byte in the command's path")
	}
	buf := append(m.encode(), first.line()...)
	var oob []byte
	if m.lockFile != nil {
		oob = unix.UnixRights(int(m.lockFile.Fd()))
	}
	rc, err := ctrl.SyscallConn()
	if err != nil {
		return err
	}
	var n int
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		n, serr = unix.SendmsgN(int(fd), buf, oob, nil, 0)
		return serr != unix.EAGAIN
	}); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	_, err = ctrl.Write(buf[n:]) // an environment larger than the socket's buffer
	return err
}

// recvStart reads the start message on the blocking descriptor fd; rest
// is what followed it in the last read (the first deadline lines).
func recvStart(fd int) (m startMsg, rest []byte, err error) {
	buf := make([]byte, 0, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	want := -1 // the length of header and body, once the header is in
	lockFD := -1
	defer func() {
		if err != nil && lockFD >= 0 {
			syscall.Close(lockFD)
		}
	}()
	for want < 0 || len(buf) < want {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, oobn, flags, _, err := unix.Recvmsg(fd, buf[len(buf):cap(buf)], oob, recvFlags)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return m, nil, err
		}
		if flags&unix.MSG_CTRUNC != 0 {
			// The kernel dropped the descriptor (no room for it here).
			return m, nil, errors.New("cli: the lock file's descriptor did not arrive with the start message")
		}
		if oobn > 0 && lockFD < 0 {
			if lockFD, err = rightsFD(oob[:oobn]); err != nil {
				return m, nil, err
			}
			syscall.CloseOnExec(lockFD) // where recvFlags cannot do it

		}
		if n == 0 {
			if len(buf) == 0 {
				return m, nil, errNoStart
			}
			return m, nil, errors.New("cli: the start message was cut short")
		}
		buf = buf[:len(buf)+n]
		if want < 0 {
			head, _, ok := bytes.Cut(buf, []byte("\n"))
			if !ok {
				if len(buf) > 64 {
					return m, nil, errors.New("cli: no start message")
				}
				continue
			}
			verb, size, _ := strings.Cut(string(head), " ")
			body, err := strconv.Atoi(size)
			if verb != startLine || err != nil || body < 0 {
				return m, nil, fmt.Errorf("cli: bad start message %q", head)
			}
			want = len(head) + 1 + body
		}
	}
	body := buf[bytes.IndexByte(buf, '\n')+1 : want]
	fields := strings.Split(string(body), "\x00")
	if len(fields) < 4 || fields[len(fields)-1] != "" {
		return m, nil, errors.New("cli: bad start message")
	}
	fields = fields[:len(fields)-1]
	argc, err := strconv.Atoi(fields[2])
	if err != nil || argc < 1 || 3+argc > len(fields) {
		return m, nil, errors.New("cli: bad start message")
	}
	// The lock file's descriptor stays a bare one: an *os.File could be
	// closed by its finalizer, and with it the flock.
	m = startMsg{mode: fields[0], path: fields[1], argv: fields[3 : 3+argc], env: fields[3+argc:], lockFD: lockFD}
	if lockFD < 0 && slices.Contains(strings.Split(m.mode, ","), modeLockFile) {
		// Without it the flock would go with distlock, the command running on.
		return m, nil, errors.New("cli: no lock file descriptor with the start message")
	}
	return m, buf[want:], nil
}

// rightsFD returns the one descriptor passed in the control message oob.
func rightsFD(oob []byte) (int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return -1, err
	}
	fd := -1
	for _, msg := range msgs {
		fds, err := unix.ParseUnixRights(&msg)
		if err != nil {
			continue
		}
		for _, f := range fds {
			if fd < 0 {
				fd = f
			} else {
				syscall.Close(f)
			}
		}
	}
	if fd < 0 {
		return -1, errors.New("cli: no descriptor in the control message")
	}
	return fd, nil
}

// isSocket reports whether descriptor fd is a socket.
func isSocket(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFSOCK
}
