//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/distlock/distlock/driver"
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
// Other hosts, user information (an "@" in a directory name must be
// written %40), queries and fragments are refused with an error matching
// distlock.ErrInvalidOption. ctx is checked once; opening does not block.
// opts are passed to New.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return New(dir, opts...)
}

// ParseURL returns the lock directory that a file URL names, as OpenURL
// would use it ("" for DefaultDir), without touching the file system.
func ParseURL(rawURL string) (dir string, err error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: filelock: backend URL %q: %s", driver.ErrInvalidOption, driver.Redact(rawURL), why)
	}
	if strings.Contains(rawURL, "@") {
		// Any "@" would be user information to the other backends, and
		// so it is hidden in messages: refuse it rather than lock a
		// directory no message can name.
		return "", bad("a file URL takes no user information (write \"@\" in a directory name as %40)")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// Not err: url.Error repeats the URL, and its reasons quote parts.
		return "", bad("malformed URL; want file:///DIR or file:DIR")
	}
	switch {
	case u.Scheme != "file":
		return "", bad("the scheme must be file")
	case u.Host != "" && u.Host != "localhost":
		return "", bad("the host is not this host; a lock directory is local (use file:///path)")
	case u.RawQuery != "" || u.ForceQuery:
		return "", bad("a file URL takes no query")
	case u.Fragment != "" || strings.Contains(rawURL, "#"):
		return "", bad("a file URL takes no fragment")
	}
	dir = u.Path
	if u.Opaque != "" {
		if dir, err = url.PathUnescape(u.Opaque); err != nil {
			return "", bad("malformed path")
		}
	}
	return dir, nil
}
