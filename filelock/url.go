//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/distlock/distlock"
)

// DefaultDir returns the per-user lock directory used when none is given:
// $XDG_RUNTIME_DIR/distlock when XDG_RUNTIME_DIR is set to an absolute
// path, else distlock-<uid> in os.TempDir(). Both are usually cleared at
// boot (see the package documentation about tokens across reboots). New
// creates it with mode 0700.
func DefaultDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "distlock")
	}
	return filepath.Join(os.TempDir(), "distlock-"+strconv.Itoa(os.Getuid()))
}

// OpenURL returns a Backend for a file URL:
//
//	file://                  DefaultDir
//	file:///var/lib/locks    an absolute directory
//	file://localhost/dir     the same, with the host named
//	file:relative/dir        a directory relative to the working directory
//
// Other hosts, queries and fragments are refused with an error matching
// distlock.ErrInvalidOption. ctx is checked once; opening does not block.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// Not url.Error itself: it would repeat the URL, password included.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: filelock: malformed URL: %w", distlock.ErrInvalidOption, err)
	}
	bad := func(why string) error {
		return fmt.Errorf("%w: filelock: URL %s: %s", distlock.ErrInvalidOption, u.Redacted(), why)
	}
	switch {
	case u.Scheme != "file":
		return nil, bad("the scheme must be file")
	case u.User != nil:
		return nil, bad("a file URL takes no user")
	case u.Host != "" && u.Host != "localhost":
		return nil, bad(fmt.Sprintf("host %q is not this host; a lock directory is local (use file:///path)", u.Host))
	case u.RawQuery != "" || u.ForceQuery:
		return nil, bad("a file URL takes no query")
	case u.Fragment != "":
		return nil, bad("a file URL takes no fragment")
	}
	dir := u.Path
	if u.Opaque != "" {
		if dir, err = url.PathUnescape(u.Opaque); err != nil {
			return nil, bad("malformed path")
		}
	}
	return New(dir, opts...)
}
