//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

// CheckPrivate exposes the check of the default directory to the tests,
// which must not change the permissions of the real one.
var CheckPrivate = checkPrivate
