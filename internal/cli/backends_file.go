//go:build unix

package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/filelock"
)

func openFile(ctx context.Context, rawURL string) (distlock.Backend, io.Closer, error) {
	b, err := filelock.OpenURL(ctx, rawURL)
	if err != nil {
		return nil, nil, err
	}
	return &fileBackend{Backend: b, leases: map[string]distlock.Lease{}}, nopCloser{}, nil
}

// fileBackend is a filelock backend that remembers the last lease it
// granted for each key, so that run can hand the lock file of its lock to
// the supervisor of the command (filelock.LeaseFile): a distlock.Lock does
// not give access to its lease. It is safe for concurrent use.
type fileBackend struct {
	*filelock.Backend

	mu     sync.Mutex
	leases map[string]distlock.Lease
}

func (b *fileBackend) Acquire(ctx context.Context, key string, o distlock.AcquireOptions) (distlock.Lease, error) {
	l, err := b.Backend.Acquire(ctx, key, o)
	if err == nil {
		b.mu.Lock()
		b.leases[key] = l
		b.mu.Unlock()
	}
	return l, err
}

// lockFile returns a new descriptor of the lock file that holds lock,
// which was granted through b.
func (b *fileBackend) lockFile(lock *distlock.Lock) (*os.File, error) {
	b.mu.Lock()
	l := b.leases[lock.Key()]
	b.mu.Unlock()
	if l == nil || l.Token() != lock.Token() {
		return nil, errors.New("no lease of this backend holds the lock")
	}
	return filelock.LeaseFile(l)
}

func (b *fileBackend) describe() string { return "file://" + b.Dir() }

// defaultDirHelp names the default lock directory in the help.
func defaultDirHelp() string { return filelock.DefaultDir() }
