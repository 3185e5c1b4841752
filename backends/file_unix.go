//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package backends

import (
	"context"

	"github.com/distlock/distlock/filelock"
)

func init() {
	Register(func(ctx context.Context, rawURL string) (Backend, error) {
		b, err := filelock.OpenURL(ctx, rawURL)
		if err != nil {
			return nil, err
		}
		return fileBackend{b}, nil
	}, "file")
}

// fileBackend is a filelock Backend, which holds nothing that needs
// closing, with a Close that does nothing.
type fileBackend struct{ *filelock.Backend }

// Close does nothing: a filelock Backend holds files only for its leases
// and waiters, which close them.
func (fileBackend) Close() error { return nil }
