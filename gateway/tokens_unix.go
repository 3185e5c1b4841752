//go:build unix

package gateway

import (
	"io/fs"
	"syscall"
)

// fileOwner returns the user who owns the file of fi.
func fileOwner(fi fs.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
