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

// defaultBase is the directory in which DefaultDir lives. Unlike /tmp or
// $XDG_RUNTIME_DIR, it survives reboots and logouts, so that tokens keep
// increasing.
const defaultBase = "/var/tmp"

// DefaultDir returns the per-user lock directory used when none is given:
// distlock-<uid> in /var/tmp, such as /var/tmp/distlock-1000. It depends
// on the user id only, never on the environment, so that every process of
// a user (a login shell, a cron job, a systemd unit) locks the same files.
// New creates it with mode 0700 and refuses it unless it is a directory of
// this user that others cannot enter.
//
// Age-based cleaners (systemd-tmpfiles removes files in /var/tmp that were
// not touched for 30 days) may remove the lock file of a key unused for
// that long: its next token then comes from the wall clock (see the package
// documentation). Held lock files are kept fresh (see Lease.Refresh); for
// tokens that must not depend on the wall clock, use a directory no
// cleaner visits, such as /var/lib/<app>/locks.
func DefaultDir() string {
	return filepath.Join(defaultBase, "distlock-"+strconv.Itoa(os.Getuid()))
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
