//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import "os"

// datasync flushes f to stable storage (on macOS with F_FULLFSYNC).
func datasync(f *os.File) error { return f.Sync() }
