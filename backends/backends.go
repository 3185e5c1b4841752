// Package backends opens a lock service from a URL, so that a program can
// leave the choice of its backend to its configuration (an environment
// variable, a flag, a file), as the distlock command does with --backend
// and DISTLOCK_BACKEND.
//
// Each backend package registers its URL schemes here when it is
// imported, as database/sql drivers do: a program imports the backends it
// may open, for their registration only if it uses nothing else of them,
// and opens the URL:
//
//	import (
//		"github.com/distlock/distlock/backends"
//		_ "github.com/distlock/distlock/etcdlock"
//		_ "github.com/distlock/distlock/redislock"
//	)
//
//	b, err := backends.Open(ctx, os.Getenv("DISTLOCK_BACKEND"))
//	if err != nil {
//		return err
//	}
//	defer b.Close()
//	client, err := distlock.New(b)
//
// This package imports no backend, so a program builds only the client
// libraries of the services it imports. The schemes are those of the
// backend packages: file (filelock, on Unix), redis, rediss,
// redis+cluster, rediss+cluster and redis+sentinel (redislock), redlock
// and redlocks (redlock), etcd and etcds (etcdlock), zk (zklock), postgres
// and postgresql (pglock), distlock+http and distlock+https (gatewaylock,
// a distlock serve gateway); each package's Schemes lists them, and its
// OpenURL documents their forms and parameters. A scheme whose package is
// not imported is unknown to Open. A program adds a backend of its own
// with Register.
//
// # Credentials
//
// No error of Open, and nothing Redact returns, contains a URL's password
// or the value of a secret query parameter, in any form of the URL, also
// one that does not parse. The user information of a URL is everything
// between "//" and the last "@": a password may hold any character as it
// is ("/", "?", "#" and "@" included), and "@" elsewhere must be written
// %40. Redact never shows the user information, the user name included
// (a mistyped URL can put the password there): it writes it "xxxxx". In
// an error of Open, a user name is masked too where it stands as a word,
// but for one that is also a part of the URL that Redact shows (a user
// named like the scheme, a host or the database). A
// query parameter is secret when its name holds "pass", "pwd", "secret",
// "token", "auth", "cred", "apikey" or "signature". When a URL cannot be
// shown safely (its hosts are not host names, a form without "//" holds an
// "@" or a ":"), only its scheme is.
package backends

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/distlock/distlock/driver"
)

// Backend is a lock service opened from a URL. Close releases what it
// holds (connections to the service); call it once the backend, and every
// Client over it, is no longer used. The value is the backend package's
// own type (*redislock.Backend, *filelock.Backend, ...), so that its
// optional interfaces (driver.Lister, driver.BatchRefresher) and its own
// methods stay reachable.
type Backend interface {
	driver.Backend
	io.Closer
}

// Opener opens the lock service named by a URL of one of the schemes it
// is registered for. Its errors should name the URL through Redact, or
// what it opened (a directory), once; Open masks any secret of the URL
// they still quote.
type Opener func(ctx context.Context, rawURL string) (Backend, error)

// ErrUnknownScheme is matched by the error of Open for a URL whose scheme
// has no backend: unknown (its package is not imported, see the package
// documentation), or not supported on this system. Such errors match
// distlock.ErrInvalidOption too.
var ErrUnknownScheme = errors.New("backends: unknown scheme")

var (
	mu       sync.RWMutex
	openers  = map[string]Opener{}
	reserved = map[string]string{} // scheme: why this system has no backend for it
)

// Register makes open the Opener of the given URL schemes (lower case,
// without "://"). A backend package, or a program with a backend of its
// own, calls it from an init function, usually with OpenerOf. Register
// panics if a scheme is not a valid URL scheme or already has an Opener,
// or if open is nil.
func Register(open Opener, schemes ...string) {
	if open == nil {
		panic("backends: Register of a nil Opener")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range schemes {
		if got, _, ok := driver.Scheme(s + ":"); !ok || got != s {
			panic(fmt.Sprintf("backends: Register: %q is not a lower-case URL scheme", s))
		}
		if _, dup := openers[s]; dup {
			panic(fmt.Sprintf("backends: Register: scheme %q registered twice", s))
		}
		openers[s] = open
		delete(reserved, s)
	}
}

// Schemes returns the schemes that Open can open, sorted.
func Schemes() []string {
	mu.RLock()
	defer mu.RUnlock()
	s := make([]string, 0, len(openers))
	for k := range openers {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// Open opens the lock service that rawURL names, with the Opener of its
// scheme. An unknown scheme, or a malformed URL, gives an error matching
// distlock.ErrInvalidOption; an unreachable service, as the backend package
// says (distlock.ErrUnavailable for the network backends). No error
// contains the URL's password (see the package documentation).
func Open(ctx context.Context, rawURL string) (Backend, error) {
	open, err := lookup(rawURL)
	if err != nil {
		return nil, err
	}
	b, err := open(ctx, rawURL)
	if err != nil {
		return nil, driver.Scrub(err, rawURL)
	}
	if b == nil {
		return nil, fmt.Errorf("backends: %s: the opener returned no backend", Redact(rawURL))
	}
	return b, nil
}

// lookup returns the Opener of rawURL's scheme.
func lookup(rawURL string) (Opener, error) {
	scheme, _, ok := driver.Scheme(rawURL)
	mu.RLock()
	open, why := openers[scheme], reserved[scheme]
	mu.RUnlock()
	want := "; want one of " + list(Schemes())
	if len(Schemes()) == 0 {
		want = "; no backend package is imported (see package backends)"
	}
	switch {
	case !ok:
		return nil, &schemeError{fmt.Sprintf("backends: malformed backend URL %q: no scheme%s", Redact(rawURL), want)}
	case open != nil:
		return open, nil
	case why != "":
		return nil, &schemeError{"backends: " + Redact(rawURL) + ": " + why + "; available: " + list(Schemes())}
	}
	return nil, &schemeError{fmt.Sprintf("backends: %s: unknown scheme %q%s", Redact(rawURL), scheme, want)}
}

// list writes schemes as "file://, redis://, ...".
func list(schemes []string) string {
	s := make([]string, len(schemes))
	for i, k := range schemes {
		s[i] = k + "://"
	}
	return strings.Join(s, ", ")
}

// schemeError is the error of Open for a URL without a backend.
type schemeError struct{ msg string }

func (e *schemeError) Error() string { return e.msg }

func (e *schemeError) Is(target error) bool {
	return target == ErrUnknownScheme || target == driver.ErrInvalidOption
}

// Redact returns rawURL fit for messages and logs, as every backend
// package shows URLs: the user information becomes "xxxxx", and so do the
// values of secret query parameters; a fragment is left out; when the URL
// cannot be shown safely, only its scheme is (see the package
// documentation).
func Redact(rawURL string) string { return driver.Redact(rawURL) }

// OpenerOf makes an Opener of a backend package's OpenURL, which it calls
// without options:
//
//	func init() { backends.Register(backends.OpenerOf(OpenURL), Schemes()...) }
func OpenerOf[B Backend, O any](open func(context.Context, string, ...O) (B, error)) Opener {
	return func(ctx context.Context, rawURL string) (Backend, error) {
		b, err := open(ctx, rawURL)
		if err != nil {
			return nil, err // not b: a nil *B in a Backend is not a nil Backend
		}
		return b, nil
	}
}
