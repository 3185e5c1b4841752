//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// flock applies how (unix.LOCK_EX, LOCK_SH, LOCK_UN, with LOCK_NB) to f,
// retrying interrupted calls. With LOCK_NB it reports (false, nil) when the
// lock is held elsewhere.
func flock(f *os.File, how int) (bool, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = unix.Flock(int(fd), how)
			if ferr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return false, err
	}
	if errors.Is(ferr, unix.EWOULDBLOCK) {
		return false, nil
	}
	if ferr != nil {
		return false, &os.PathError{Op: "flock", Path: f.Name(), Err: ferr}
	}
	return true, nil
}

const (
	flockEX = unix.LOCK_EX
	flockSH = unix.LOCK_SH
	flockUN = unix.LOCK_UN
	flockNB = unix.LOCK_NB
)

// dupFile returns a new descriptor (close-on-exec) of f's open file
// description.
func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	nfd := -1
	var derr error
	if err := rc.Control(func(fd uintptr) {
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, &os.PathError{Op: "dup", Path: f.Name(), Err: derr}
	}
	return os.NewFile(uintptr(nfd), f.Name()), nil
}
