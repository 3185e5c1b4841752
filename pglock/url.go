package pglock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
)

// DefaultDialTimeout bounds the ping with which OpenURL checks the server.
const DefaultDialTimeout = 5 * time.Second

// OpenURL connects a pool of its own to the PostgreSQL server named by
// rawURL, checks that the server answers, and returns a Backend over the
// pool whose Close also closes the pool. The form is libpq's and pgx's:
//
//	postgres://[user[:password]@]host[:port][,host[:port]...]/database[?options]
//	postgresql://...
//
// Options are this package's, and those of pgx and libpq, such as
// "sslmode", "connect_timeout", "application_name" and "pool_max_conns"
// (see the Cost section of the package documentation for
// sizing the pool). This package's are:
//
//   - "mode": "session" (the default) or "lease" (WithMode); lease is for
//     a URL that goes through a pooler in transaction mode, such as
//     PgBouncer's pool_mode = transaction.
//   - "listen_host": host[:port] of a direct session with the same server,
//     user and database, for LISTEN in lease mode (WithListen): the URL
//     with its hosts replaced by this one. Without it, lease-mode waiters
//     poll.
//   - "poll_interval", "loss_grace", "request_timeout": Go durations
//     (WithPollInterval, WithLossGrace, WithRequestTimeout).
//
// The URL is read as libpq reads it, but for its user information, which
// ends at the last "@" (a password may hold "/" as it is): percent-escapes
// are decoded and a "+" is a plus, so a space is written %20, as in
// options=-c%20statement_timeout%3D5000.
//
// opts are applied after the URL's.
//
// Errors never contain the password: they show the URL redacted.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	cfg, own, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	shown := driver.Redact(rawURL)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: pglock: %s: %w", driver.ErrInvalidOption, shown, driver.Scrub(err, rawURL))
	}
	b, err := New(pool, append(own, opts...)...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, DefaultDialTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		b.Close()
		pool.Close()
		return nil, fmt.Errorf("%w: pglock: %s: %w", driver.ErrUnavailable, shown, driver.Scrub(connectCause(err), rawURL))
	}
	b.ownsPool = true
	return b, nil
}

// durationParams are the package's URL parameters that take a duration.
var durationParams = map[string]func(time.Duration) Option{
	"loss_grace":      WithLossGrace,
	"request_timeout": WithRequestTimeout,
	"poll_interval":   WithPollInterval,
}

// parseURL is OpenURL's reading of rawURL, with no I/O: the pool's
// configuration and the options the URL sets. Its errors match
// distlock.ErrInvalidOption and never show the password.
func parseURL(rawURL string) (*pgxpool.Config, []Option, error) {
	// First the reading every backend URL gets (driver.ParseURL): "//" and a
	// host are required, so that a mistyped URL never reaches libpq's
	// default (the local server) and the password is never shown.
	bu, err := driver.ParseURL(rawURL)
	if err != nil {
		scheme, _, _ := driver.Scheme(rawURL)
		if scheme != "postgresql" {
			scheme = "postgres"
		}
		return nil, nil, fmt.Errorf("%w: pglock: malformed backend URL %q: %v; want %s://[user[:password]@]host[:port][,host[:port]...]/database[?options]",
			driver.ErrInvalidOption, driver.Redact(rawURL), err, scheme)
	}
	for i, h := range bu.Hosts {
		if _, err := driver.HostPort(h, "5432"); err != nil {
			return nil, nil, fmt.Errorf("%w: pglock: malformed backend URL %q: host #%d: %v", driver.ErrInvalidOption, driver.Redact(rawURL), i+1, err)
		}
	}
	shown := driver.Redact(rawURL)
	if bu.Scheme != "postgres" && bu.Scheme != "postgresql" {
		return nil, nil, fmt.Errorf("%w: pglock: %s: the scheme must be postgres or postgresql", driver.ErrInvalidOption, shown)
	}

	params, err := libpqParams(bu.RawQuery)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: pglock: %s: %v", driver.ErrInvalidOption, shown, err)
	}
	q := url.Values{}
	for _, p := range params {
		q.Add(p.name, p.value)
	}
	var own []Option
	// In order, so that the same URL always gets the same error.
	for _, name := range slices.Sorted(maps.Keys(durationParams)) {
		if !q.Has(name) {
			continue
		}
		d, err := time.ParseDuration(q.Get(name))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: pglock: %s: %s %q is not a duration", driver.ErrInvalidOption, shown, name, q.Get(name))
		}
		own = append(own, durationParams[name](d))
	}
	mode := SessionMode
	if q.Has("mode") {
		switch m := q.Get("mode"); m {
		case "session":
		case "lease":
			mode = LeaseMode
		default:
			return nil, nil, fmt.Errorf("%w: pglock: %s: unknown mode %q: want session or lease", driver.ErrInvalidOption, shown, m)
		}
		own = append(own, WithMode(mode))
	}
	if q.Has("listen_host") {
		listenHost := q.Get("listen_host")
		if mode != LeaseMode {
			return nil, nil, fmt.Errorf("%w: pglock: %s: listen_host is for mode=lease", driver.ErrInvalidOption, shown)
		}
		if _, err := driver.HostPort(listenHost, "5432"); err != nil {
			return nil, nil, fmt.Errorf("%w: pglock: %s: listen_host: %v", driver.ErrInvalidOption, shown, err)
		}
		// The same URL with the listen host, less the pool's parameters,
		// which a single connection would send to the server as settings.
		lu, err := libpqURL(bu, listenHost, params, func(name string) bool { return ours(name) || strings.HasPrefix(name, "pool_") })
		if err != nil {
			return nil, nil, fmt.Errorf("%w: pglock: %s: %v", driver.ErrInvalidOption, shown, err)
		}
		own = append(own, WithListen(lu))
	}

	pu, err := libpqURL(bu, strings.Join(bu.Hosts, ","), params, ours)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: pglock: %s: %v", driver.ErrInvalidOption, shown, err)
	}
	cfg, err := pgxpool.ParseConfig(pu)
	if err != nil {
		// Without the quote of the URL, pgx's message names settings and
		// their values, never the user information (see libpqURL), which
		// a driver.Scrub could only garble: a password "P" masked in
		// "ParseInt".
		return nil, nil, fmt.Errorf("%w: pglock: %s: %w", driver.ErrInvalidOption, shown, unquoted(err))
	}
	return cfg, own, nil
}

// ours reports whether name is a parameter of this package, which pgx is
// not given.
func ours(name string) bool {
	_, duration := durationParams[name]
	return duration || name == "mode" || name == "listen_host"
}

// libpqURL writes bu, with hosts, for pgx, which reads a URL as libpq
// does: the user information (as backendurl read it), the database and
// params (less those drop names) each percent-encoded in full (see
// libpqEscape), so that pgx reads them as they were read here and finds
// nothing to refuse or to quote. Written as they came, they were read
// otherwise: libpq ends the user information at a "/", so it took the
// rest of a password holding one for a path and a query (and pgx quoted
// it in an error); and url.Values.Encode writes a space as "+", a plus
// for libpq, which made the server refuse
// "options=-c%20statement_timeout%3D5000".
func libpqURL(bu *driver.URL, hosts string, params []param, drop func(name string) bool) (string, error) {
	// pgx refuses a NUL, which no setting can hold, quoting what holds
	// it: refused here, quoting nothing.
	if strings.ContainsRune(bu.User+bu.Password, 0) {
		return "", errors.New("the user information holds a NUL")
	}
	var b strings.Builder
	b.WriteString("postgres://")
	if bu.HasUser {
		b.WriteString(libpqEscape(bu.User))
		if bu.HasPassword {
			b.WriteString(":" + libpqEscape(bu.Password))
		}
		b.WriteByte('@')
	}
	// libpq percent-decodes the hosts too; HostPort checked the rest of
	// them.
	if _, err := url.PathUnescape(hosts); err != nil {
		return "", errors.New("bad percent-encoding in a host")
	}
	b.WriteString(hosts)
	if db, ok := strings.CutPrefix(bu.Path, "/"); ok {
		name, err := url.PathUnescape(db)
		switch {
		case err != nil:
			return "", errors.New("bad percent-encoding in the database name")
		case strings.ContainsRune(name, 0):
			return "", errors.New("the database name holds a NUL")
		}
		b.WriteString("/" + libpqEscape(name))
	}
	sep := "?"
	for _, p := range params {
		if !drop(p.name) {
			b.WriteString(sep + libpqEscape(p.name) + "=" + libpqEscape(p.value))
			sep = "&"
		}
	}
	return b.String(), nil
}

// unquoted returns pgx's error of a connection string it cannot parse
// without the connection string, which it quotes (password masked, as far
// as pgx can tell), so that it shows nothing of the URL that OpenURL does
// not show itself. errors.Is and errors.As still see err's chain;
// errors.Unwrap does not reach the quote.
func unquoted(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return err
	}
	msg := pe.Error()
	// libpqURL percent-encodes everything: "`: " cannot be in the string.
	if i := strings.Index(msg, "`: "); strings.HasPrefix(msg, "cannot parse `") && i >= 0 {
		return &reworded{err: err, msg: "cannot parse the URL: " + msg[i+3:]}
	}
	return err
}

// param is a URL's query parameter, as libpq reads it.
type param struct{ name, value string }

// libpqParams reads rawQuery, what follows a URL's "?", as libpq does:
// pairs separated by "&", percent-decoded, a "+" left a plus (where
// net/url reads a space). A pair without "=" has an empty value, and an
// "=" in a value is kept, as net/url reads them (libpq refuses both). A
// NUL is an error (see libpqURL).
func libpqParams(rawQuery string) ([]param, error) {
	var ps []param
	for _, pair := range strings.Split(rawQuery, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		name, err1 := url.PathUnescape(k)
		value, err2 := url.PathUnescape(v)
		switch {
		case err1 != nil || err2 != nil:
			return nil, errors.New("malformed query parameters")
		case strings.ContainsRune(name+value, 0):
			return nil, errors.New("a query parameter holds a NUL (%00)")
		}
		ps = append(ps, param{name, value})
	}
	return ps, nil
}

// libpqEscape percent-encodes every byte of s but letters, digits and
// "-._~".
func libpqEscape(s string) string {
	// QueryEscape writes a space as "+", and a plus as "%2B".
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
