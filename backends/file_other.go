//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package backends

import "runtime"

func init() {
	reserved["file"] = "the file:// backend is not supported on " + runtime.GOOS
}
