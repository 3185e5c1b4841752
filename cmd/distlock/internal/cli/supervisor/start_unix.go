//go:build unix

package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// StartMsg is what distlock tells its supervisor to run, on the control
// socket (see Main), once the lock is held. It comes over the
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
type StartMsg struct {
	Mode     string // comma-separated: ModeLockFile, ModeForeground+N
	Path     string
	Argv     []string
	Env      []string
	LockFile *os.File // sent: nil for none
	lockFD   int      // received: -1 for none
}

const startLine = "start"

// errNoStart: distlock closed the control socket without a start message
// (the lock was not acquired, or distlock started no command).
var errNoStart = errors.New("supervisor: the supervisor was told nothing to run")

// encode returns m on the wire.
func (m StartMsg) encode() []byte {
	var p bytes.Buffer
	field := func(s string) {
		p.WriteString(s)
		p.WriteByte(0)
	}
	field(m.Mode)
	field(m.Path)
	field(strconv.Itoa(len(m.Argv)))
	for _, a := range m.Argv {
		field(a)
	}
	for _, kv := range m.Env {
		field(kv)
	}
	return append(fmt.Appendf(nil, "%s %d\n", startLine, p.Len()), p.Bytes()...)
}

// SendStart writes m and then first, the first Deadline, on ctrl, the
// non-blocking end of the control socket.
func SendStart(ctrl *os.File, m StartMsg, first Deadline) error {
	if strings.ContainsRune(m.Mode, 0) || strings.ContainsRune(m.Path, 0) {
		return fmt.Errorf("supervisor: a NUL byte in the command's path")
	}
	buf := append(m.encode(), first.Line()...)
	var oob []byte
	if m.LockFile != nil {
		oob = syscall.UnixRights(int(m.LockFile.Fd()))
	}
	rc, err := ctrl.SyscallConn()
	if err != nil {
		return err
	}
	var n int
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		n, serr = syscall.SendmsgN(int(fd), buf, oob, nil, 0)
		return serr != syscall.EAGAIN
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
// is what followed it in the last read (the first Deadline lines).
func recvStart(fd int) (m StartMsg, rest []byte, err error) {
	buf := make([]byte, 0, 64<<10)
	oob := make([]byte, syscall.CmsgSpace(4))
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
		n, oobn, flags, _, err := syscall.Recvmsg(fd, buf[len(buf):cap(buf)], oob, recvFlags)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return m, nil, err
		}
		if flags&syscall.MSG_CTRUNC != 0 {
			// The kernel dropped the descriptor (no room for it here).
			return m, nil, errors.New("supervisor: the lock file's descriptor did not arrive with the start message")
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
			return m, nil, errors.New("supervisor: the start message was cut short")
		}
		buf = buf[:len(buf)+n]
		if want < 0 {
			head, _, ok := bytes.Cut(buf, []byte("\n"))
			if !ok {
				if len(buf) > 64 {
					return m, nil, errors.New("supervisor: no start message")
				}
				continue
			}
			verb, size, _ := strings.Cut(string(head), " ")
			body, err := strconv.Atoi(size)
			if verb != startLine || err != nil || body < 0 {
				return m, nil, fmt.Errorf("supervisor: bad start message %q", head)
			}
			want = len(head) + 1 + body
		}
	}
	body := buf[bytes.IndexByte(buf, '\n')+1 : want]
	fields := strings.Split(string(body), "\x00")
	if len(fields) < 4 || fields[len(fields)-1] != "" {
		return m, nil, errors.New("supervisor: bad start message")
	}
	fields = fields[:len(fields)-1]
	argc, err := strconv.Atoi(fields[2])
	if err != nil || argc < 1 || 3+argc > len(fields) {
		return m, nil, errors.New("supervisor: bad start message")
	}
	// The lock file's descriptor stays a bare one: an *os.File could be
	// closed by its finalizer, and with it the flock.
	m = StartMsg{Mode: fields[0], Path: fields[1], Argv: fields[3 : 3+argc], Env: fields[3+argc:], lockFD: lockFD}
	if lockFD < 0 && slices.Contains(strings.Split(m.Mode, ","), ModeLockFile) {
		// Without it the flock would go with distlock, the command running on.
		return m, nil, errors.New("supervisor: no lock file descriptor with the start message")
	}
	return m, buf[want:], nil
}

// rightsFD returns the one descriptor passed in the control message oob.
func rightsFD(oob []byte) (int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return -1, err
	}
	fd := -1
	for _, msg := range msgs {
		fds, err := syscall.ParseUnixRights(&msg)
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
		return -1, errors.New("supervisor: no descriptor in the control message")
	}
	return fd, nil
}

// isSocket reports whether descriptor fd is a socket.
func isSocket(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFSOCK
}
