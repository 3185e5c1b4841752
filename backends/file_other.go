//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package backends

import "runtime"

// filelock has no backend on this system, and so registers nothing.
func init() {
	reserved["file"] = "the file:// backend is not supported on " + runtime.GOOS
}
