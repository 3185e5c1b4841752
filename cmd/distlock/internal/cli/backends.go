package cli

import (
	"context"
	"io"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/backends"
	"github.com/distlock/distlock/driver"
)

// An Opener opens the lock service named by a backend URL. The Closer
// releases what the backend holds (connections); it is called once, after
// the backend's last use.
type Opener func(ctx context.Context, rawURL string) (driver.Backend, io.Closer, error)

// registry holds the openers the command puts in place of the backends
// package's: none on Unix, where every scheme is opened by backends.Open,
// so the command and Go programs share one implementation (the backend
// packages register their schemes: see backends_builtin.go).
var registry = map[string]Opener{}

// AsOpener adapts a backend package's OpenURL function, whose backend has a
// Close method, to an Opener.
func AsOpener[B interface {
	driver.Backend
	Close() error
}](open func(ctx context.Context, rawURL string) (B, error)) Opener {
	return func(ctx context.Context, rawURL string) (driver.Backend, io.Closer, error) {
		b, err := open(ctx, rawURL)
		if err != nil {
			return nil, nil, err
		}
		return b, b, nil
	}
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// openBackend opens the backend named by rawURL ("" for the default, a
// file:// backend in filelock's default directory) with the openers of
// this run, else with backends.Open. The backends name what they opened
// in their errors, so nothing is added to them; no error contains the
// URL's password.
func openBackend(ctx context.Context, rawURL string, openers map[string]Opener) (driver.Backend, io.Closer, error) {
	if rawURL == "" {
		rawURL = "file://"
	}
	scheme, _, ok := driver.Scheme(rawURL)
	if !ok && strings.HasPrefix(rawURL, "/") {
		shown := redact(rawURL)
		return nil, nil, usagef("backend URL %s has no scheme; for a lock directory use file://%s", shown, shown)
	}
	if open := openers[scheme]; ok && open != nil {
		b, closer, err := open(ctx, rawURL)
		if err != nil {
			return nil, nil, driver.Scrub(err, rawURL)
		}
		if closer == nil {
			closer = nopCloser{}
		}
		return b, closer, nil
	}
	b, err := backends.Open(ctx, rawURL)
	if err != nil {
		return nil, nil, err
	}
	return b, b, nil
}

// sessionLocksURL returns rawURL parsed, and true, if it is a
// postgres:// URL of session locks (pglock's default mode), where each
// lock held or awaited keeps a connection of the pool; false for any
// other URL, and for one that does not parse (opening it says why).
func sessionLocksURL(rawURL string) (*driver.URL, bool) {
	scheme, _, ok := driver.Scheme(rawURL)
	if !ok || (scheme != "postgres" && scheme != "postgresql") {
		return nil, false
	}
	u, err := driver.ParseURL(rawURL, driver.URLForm{Pkg: "distlock", Schemes: []string{scheme}, Usage: func(string) string { return "" }})
	if err != nil {
		return nil, false
	}
	mode, _ := u.Get("mode")
	return u, mode != "lease"
}

// openToList is openBackend for listing holders: it creates nothing. A
// file:// lock directory that does not exist holds no lock, and is not
// created to say so.
func openToList(ctx context.Context, rawURL string, openers map[string]Opener) (driver.Backend, io.Closer, error) {
	if rawURL == "" {
		rawURL = "file://"
	}
	if scheme, _, _ := driver.Scheme(rawURL); scheme == "file" {
		if dir, missing := missingLockDir(rawURL); missing {
			return emptyDir(dir), nopCloser{}, nil
		}
	}
	return openBackend(ctx, rawURL, openers)
}

// emptyDir is a lock directory that does not exist: it lists no holder.
type emptyDir string

func (d emptyDir) Acquire(context.Context, string, driver.AcquireOptions) (driver.Lease, error) {
	return nil, usagef("lock directory %s does not exist", string(d))
}

func (emptyDir) List(context.Context, string) ([]driver.Holder, error) { return nil, nil }

func (d emptyDir) describe() string { return "file://" + string(d) }

// describeBackend names the backend b, opened from rawURL, for messages:
// the resolved directory of a file:// backend, the redacted URL otherwise.
func describeBackend(b driver.Backend, rawURL string) string {
	if d, ok := b.(emptyDir); ok {
		return d.describe()
	}
	if d, ok := describeFile(b); ok {
		return d
	}
	if rawURL == "" {
		rawURL = "file://"
	}
	return redact(rawURL)
}

// schemes lists the schemes of this run for the help: the backends
// package's and those of the openers.
func schemes(openers map[string]Opener) string {
	s := backends.Schemes()
	for k := range openers {
		if !slices.Contains(s, k) {
			s = append(s, k)
		}
	}
	slices.Sort(s)
	for i := range s {
		s[i] += "://"
	}
	return strings.Join(s, ", ")
}

// redact returns rawURL fit for messages and logs (see backends.Redact).
func redact(rawURL string) string { return driver.Redact(rawURL) }

// go-redis logs its own dial retries to stderr; distlock reports the
// outcome itself, once.
func init() { redis.SetLogger(quietRedis{}) }

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
