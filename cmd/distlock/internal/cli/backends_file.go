//go:build unix

package cli

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
)

// lockFile returns a new descriptor of the lock file that holds lock, for
// the supervisor of the command (see filelock.Backend.File), or nil if b
// is not a file backend.
func lockFile(b driver.Backend, lock filelock.Held) (*os.File, error) {
	if fb, ok := b.(*filelock.Backend); ok {
		return fb.File(lock)
	}
	return nil, nil
}

// describeFile names a file backend by its resolved directory.
func describeFile(b driver.Backend) (string, bool) {
	if fb, ok := b.(*filelock.Backend); ok {
		return "file://" + fb.Dir(), true
	}
	return "", false
}

// unreadFiles returns the lock files that the listing of a file backend
// could not read, if err says so (see filelock.ListError), and whether it
// read others (listed something, if only that nothing is held).
func unreadFiles(err error) (unread []error, listed, ok bool) {
	var le *filelock.ListError
	if !errors.As(err, &le) {
		return nil, false, false
	}
	return le.Unread, le.Read > 0, true
}

// defaultDirHelp names the default lock directory in the help.
func defaultDirHelp() string { return filelock.DefaultDir() }

// missingLockDir returns the lock directory of a file URL, and whether it
// does not exist. A URL that does not parse is not missing: opening it
// reports what is wrong.
func missingLockDir(rawURL string) (string, bool) {
	dir, err := filelock.ParseURL(rawURL)
	if err != nil {
		return "", false
	}
	if dir == "" {
		dir = filelock.DefaultDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", false
	}
	_, err = os.Stat(abs)
	return abs, errors.Is(err, fs.ErrNotExist)
}
