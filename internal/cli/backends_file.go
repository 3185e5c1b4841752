//go:build unix

package cli

import (
	"context"
	"io"
	"os"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/filelock"
)

func openFile(ctx context.Context, rawURL string) (distlock.Backend, io.Closer, error) {
	b, err := filelock.OpenURL(ctx, rawURL)
	if err != nil {
		return nil, nil, err
	}
	return b, nopCloser{}, nil
}

// lockFile returns a new descriptor of the lock file that holds lock, for
// the supervisor of the command (see filelock.Backend.File), or nil if b
// is not a file backend.
func lockFile(b distlock.Backend, lock *distlock.Lock) (*os.File, error) {
	if fb, ok := b.(*filelock.Backend); ok {
		return fb.File(lock)
	}
	return nil, nil
}

// describeFile names a file backend by its resolved directory.
func describeFile(b distlock.Backend) (string, bool) {
	if fb, ok := b.(*filelock.Backend); ok {
		return "file://" + fb.Dir(), true
	}
	return "", false
}

// defaultDirHelp names the default lock directory in the help.
func defaultDirHelp() string { return filelock.DefaultDir() }
