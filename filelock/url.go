//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

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
// written %40), parameters and fragments are refused with an error matching
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

// urlForm is what a file URL looks like.
var urlForm = driver.URLForm{
	Pkg:     "filelock",
	Schemes: []string{"file"},
	Usage:   func(string) string { return "file:///DIR or file:DIR" },
	Local:   true,
}

// ParseURL returns the lock directory that a file URL names, as OpenURL
// would use it ("" for DefaultDir), without touching the file system.
func ParseURL(rawURL string) (dir string, err error) {
	u, err := driver.ParseURL(rawURL, urlForm)
	if err != nil {
		return "", err
	}
	if len(u.Hosts) > 1 || len(u.Hosts) == 1 && u.Hosts[0] != "" && u.Hosts[0] != "localhost" {
		return "", u.Bad("the host is not this host; a lock directory is local (use file:///path)")
	}
	if err := u.Done(); err != nil {
		return "", err
	}
	if dir, err = url.PathUnescape(u.Path); err != nil {
		return "", u.Bad("malformed path")
	}
	return dir, nil
}
