//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package gateway

import (
	"errors"

	"github.com/distlock/distlock/filelock"
)

// unreadEntries returns the lock entries that a listing could not read,
// if err says that it listed the others (see filelock.ListError), and
// whether it read any.
func unreadEntries(err error) (unread []error, listed, partial bool) {
	var le *filelock.ListError
	if !errors.As(err, &le) {
		return nil, false, false
	}
	return le.Unread, le.Read > 0, true
}
