//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"os"

	"golang.org/x/sys/unix"
)

// touch sets the access and modification times of f to now.
func touch(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var terr error
	if err := rc.Control(func(fd uintptr) { terr = unix.Futimes(int(fd), nil) }); err != nil {
		return err
	}
	if terr != nil {
		return &os.PathError{Op: "futimes", Path: f.Name(), Err: terr}
	}
	return nil
}
