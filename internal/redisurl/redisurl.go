// Package redisurl reads the URLs of the backends built on Redis (the
// redis:// forms of redislock and the redlock:// forms of redlock), so that
// both read hosts, credentials, TLS files and go-redis's options by one set
// of rules and word their errors alike. Each backend keeps what is its own:
// its schemes and options, how many hosts it takes and what its path means.
//
// Errors never contain a secret: messages show the URL redacted (see
// driver.Redact), go-redis is given URLs without user information, and
// errors of I/O are scrubbed with driver.Scrub.
package redisurl

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
)

// Form is what the URLs of one backend package look like.
type Form struct {
	// Pkg names the package in errors ("redislock").
	Pkg string
	// Schemes are the schemes the package takes, lower-cased.
	Schemes []string
	// TLSSchemes are those of Schemes that speak TLS; the options ca,
	// cert and key need one of them.
	TLSSchemes []string
	// Want says what a URL of scheme looks like ("want redis://..."); for a
	// scheme not in Schemes, what the package's URLs look like in general.
	Want func(scheme string) string
	// UnknownScheme is added to the error of a URL whose scheme is not one
	// of Schemes, after Want("").
	UnknownScheme string
}

// URL is a backend URL of a Form, read without I/O: its parts, the TLS
// files its options name, and what of it may be shown.
type URL struct {
	*driver.URL

	Raw   string // as given: only for scrubbing errors, never shown
	Shown string // redacted, for messages

	// CA, Cert and Key are the options ca, cert and key: PEM files read
	// when opening (see TLS).
	CA, Cert, Key string

	pkg string
}

// Read splits raw by the rules of driver.ParseURL, checks its scheme
// against f, lets options take the package's own options out of the query
// (its error is shown after the URL), and takes out ca, cert and key. Its
// errors match distlock.ErrInvalidOption and show the URL redacted.
func Read(f Form, raw string, options func(q url.Values) error) (*URL, error) {
	r := &URL{Raw: raw, Shown: driver.Redact(raw), pkg: f.Pkg}
	u, err := driver.ParseURL(raw)
	if err != nil {
		scheme, _, _ := driver.Scheme(raw)
		return nil, r.Bad("%v; %s", err, f.Want(scheme))
	}
	r.URL = u
	if !slices.Contains(f.Schemes, u.Scheme) {
		return nil, r.Bad("unsupported scheme; %s%s", f.Want(""), f.UnknownScheme)
	}
	if err := options(u.Query); err != nil {
		return nil, r.Bad("%v", err)
	}
	q := u.Query
	r.CA, r.Cert, r.Key = q.Get("ca"), q.Get("cert"), q.Get("key")
	q.Del("ca")
	q.Del("cert")
	q.Del("key")
	if r.HasTLSFiles() && !slices.Contains(f.TLSSchemes, u.Scheme) {
		need := make([]string, len(f.TLSSchemes))
		for i, s := range f.TLSSchemes {
			need[i] = s + "://"
		}
		return nil, r.Bad("options ca, cert and key need %s", strings.Join(need, " or "))
	}
	return r, nil
}

// Bad returns an error of a malformed URL: it matches
// distlock.ErrInvalidOption and says the package, the URL redacted and
// what is wrong, as format and args say.
func (r *URL) Bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s: malformed backend URL %q: %s", driver.ErrInvalidOption, r.pkg, r.Shown, fmt.Sprintf(format, args...))
}

// Addr returns the i-th host as host:port, with defaultPort where it has
// none; an error names the host by its place, never by what it says.
func (r *URL) Addr(i int, defaultPort string) (string, error) {
	a, err := driver.HostPort(r.Hosts[i], defaultPort)
	if err != nil {
		return "", r.Bad("host #%d: %v", i+1, err)
	}
	return a, nil
}

// Addrs returns every host as Addr does, failing at the first bad one.
func (r *URL) Addrs(defaultPort string) ([]string, error) {
	addrs := make([]string, 0, len(r.Hosts))
	for i := range r.Hosts {
		a, err := r.Addr(i, defaultPort)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// NoAddrOption refuses go-redis's addr option: the hosts are listed before
// the path.
func (r *URL) NoAddrOption() error {
	if r.Query.Has("addr") {
		return r.Bad("list the hosts before the path, separated by commas, not as addr parameters")
	}
	return nil
}

// GoRedisURL returns the URL that go-redis is given to read its own
// options from: scheme, addr and path with the query left after the
// package's options. It has no user information, and the query no secret
// option, so that no error of go-redis can quote a secret.
func (r *URL) GoRedisURL(scheme, addr, path string) string {
	return (&url.URL{Scheme: scheme, Host: addr, Path: path, RawQuery: r.Query.Encode()}).String()
}

// Options returns go-redis's options for one server at addr, read by
// redis.ParseURL from GoRedisURL(scheme, addr, path), with the URL's
// credentials.
func (r *URL) Options(scheme, addr, path string) (*redis.Options, error) {
	o, err := redis.ParseURL(r.GoRedisURL(scheme, addr, path))
	if err != nil {
		return nil, r.Bad("%v", err)
	}
	o.Username, o.Password = r.User, r.Password
	return o, nil
}

// HasTLSFiles reports whether the URL names any of ca, cert and key.
func (r *URL) HasTLSFiles() bool { return r.CA != "" || r.Cert != "" || r.Key != "" }

// TLS returns base with the URL's TLS files (see driver.TLSConfig), or base
// itself when it names none. A file that cannot be used gives an error of
// Fail, matching distlock.ErrInvalidOption.
func (r *URL) TLS(base *tls.Config) (*tls.Config, error) {
	if !r.HasTLSFiles() {
		return base, nil
	}
	cfg, err := driver.TLSConfig(base, r.CA, r.Cert, r.Key)
	if err != nil {
		return nil, r.Fail(driver.ErrInvalidOption, "TLS options", err)
	}
	return cfg, nil
}

// Fail describes a failure to open the URL: the package, the URL redacted,
// what failed, and err scrubbed of the URL's secrets (if not nil). The
// error matches sentinel, unless it is nil: for a failure that is neither
// the caller's mistake nor worth retrying.
func (r *URL) Fail(sentinel error, what string, err error) error {
	msg := r.pkg + ": " + r.Shown + ": " + what
	switch {
	case sentinel == nil:
		return fmt.Errorf("%s: %w", msg, r.Scrub(err))
	case err != nil:
		return fmt.Errorf("%w: %s: %w", sentinel, msg, r.Scrub(err))
	}
	return fmt.Errorf("%w: %s", sentinel, msg)
}

// Scrub returns err with the URL's secrets masked (driver.Scrub).
func (r *URL) Scrub(err error) error { return driver.Scrub(err, r.Raw) }

// Bool takes the boolean option name out of q: set says it was there, and
// on what it said.
func Bool(q url.Values, name string) (on, set bool, err error) {
	if !q.Has(name) {
		return false, false, nil
	}
	on, err = strconv.ParseBool(q.Get(name))
	if err != nil {
		return false, true, fmt.Errorf("option %s: not a boolean", name)
	}
	q.Del(name)
	return on, true, nil
}

// Duration takes the option name, a Go duration, out of q: set says it
// was there.
func Duration(q url.Values, name string) (d time.Duration, set bool, err error) {
	if !q.Has(name) {
		return 0, false, nil
	}
	d, err = time.ParseDuration(q.Get(name))
	if err != nil {
		return 0, true, fmt.Errorf("option %s: not a duration", name)
	}
	q.Del(name)
	return d, true, nil
}

// String takes the option name out of q: set says it was there.
func String(q url.Values, name string) (v string, set bool) {
	if !q.Has(name) {
		return "", false
	}
	v = q.Get(name)
	q.Del(name)
	return v, true
}
