package pglock

import (
	"context"
	"errors"
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
//	postgres://[user[:password]@]host[:port][,host[:port]...]/database[?PARAMS]
//	postgresql://...
//
// PARAMS are this package's and those of libpq and pgx that it passes on
// to pgx, which are:
//
//   - libpq's connection parameters that pgx reads: connect_timeout,
//     sslmode, sslkey, sslcert, sslcertmode, sslrootcert, sslnegotiation,
//     sslpassword, sslsni, krbspn, krbsrvname, target_session_attrs,
//     service, servicefile, passfile, min_protocol_version,
//     max_protocol_version, channel_binding and require_auth;
//   - libpq's application_name and options, which the server reads;
//   - pgx's statement_cache_capacity, description_cache_capacity and
//     default_query_exec_mode, and its pool's pool_max_conns,
//     pool_min_conns, pool_min_idle_conns, pool_max_conn_lifetime,
//     pool_max_conn_idle_time, pool_health_check_period,
//     pool_max_conn_lifetime_jitter and pool_ping_timeout (see the Cost
//     section of the package documentation for sizing the pool).
//
// This package's are:
//
//   - "mode": "session" (the default) or "lease" (WithMode); lease is for
//     a URL that goes through a pooler in transaction mode, such as
//     PgBouncer's pool_mode = transaction.
//   - "listen_host": host[:port] of a direct session with the same server,
//     user and database, for LISTEN in lease mode (WithListen): the URL
//     with its hosts replaced by this one. Without it, lease-mode waiters
//     poll, and so do watchers of a key (a Client's Watch, an election's
//     Observe).
//   - "poll_interval", "loss_grace", "request_timeout": Go durations
//     (WithPollInterval, WithLossGrace, WithRequestTimeout).
//
// Connecting is bounded by libpq's connect_timeout (seconds), which
// stands for the dial_timeout of the other backends. Any other parameter
// is refused, and so is a parameter given twice (see driver.ParseURL): a
// server setting is given as libpq gives one, in options, such as
// options=-c%20statement_timeout%3D5000. The hosts, the user information
// and the database are given in their places, not as parameters.
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
	u, cfg, own, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, u.Fail(driver.ErrInvalidOption, "pool", err)
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
		return nil, u.Fail(driver.ErrUnavailable, "ping", connectCause(err))
	}
	b.ownsPool = true
	return b, nil
}

// libpqParams are the URL parameters of libpq and pgx that OpenURL
// passes on to pgx. pgx would send any other name to the server as a
// setting, which libpq does not do: OpenURL refuses it.
var libpqParams = []string{
	// libpq's, which pgx reads (pgconn.ParseConfig).
	"connect_timeout", "sslmode", "sslkey", "sslcert", "sslcertmode", "sslrootcert", "sslnegotiation",
	"sslpassword", "sslsni", "krbspn", "krbsrvname", "target_session_attrs", "service", "servicefile",
	"passfile", "min_protocol_version", "max_protocol_version", "channel_binding", "require_auth",
	// libpq's that the server reads.
	"application_name", "options",
	// pgx's (pgx.ParseConfig).
	"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode",
	// pgx's pool's (pgxpool.ParseConfig), which the LISTEN session is not given.
	"pool_max_conns", "pool_min_conns", "pool_min_idle_conns", "pool_max_conn_lifetime",
	"pool_max_conn_idle_time", "pool_health_check_period", "pool_max_conn_lifetime_jitter", "pool_ping_timeout",
}

// urlForm is what this package's URLs look like.
var urlForm = driver.URLForm{
	Pkg:     "pglock",
	Schemes: []string{"postgres", "postgresql"},
	Usage: func(scheme string) string {
		return scheme + "://[user[:password]@]host[:port][,host[:port]...]/database[?PARAMS]"
	},
}

// parseURL is OpenURL's reading of rawURL, with no I/O: the pool's
// configuration and the options the URL sets. Its errors match
// distlock.ErrInvalidOption and never show the password.
func parseURL(rawURL string) (*driver.URL, *pgxpool.Config, []Option, error) {
	// The reading every backend URL gets: "//" and a host are required,
	// so that a mistyped URL never reaches libpq's default (the local
	// server) and the password is never shown.
	u, err := driver.ParseURL(rawURL, urlForm)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := u.HostPorts("5432"); err != nil {
		return nil, nil, nil, err
	}
	var own []Option
	for _, p := range []struct {
		name string
		opt  func(time.Duration) Option
	}{{"loss_grace", WithLossGrace}, {"poll_interval", WithPollInterval}, {"request_timeout", WithRequestTimeout}} {
		if d, ok := u.Duration(p.name); ok {
			own = append(own, p.opt(d))
		}
	}
	mode := SessionMode
	if m, ok := u.Get("mode"); ok {
		switch m {
		case "session":
		case "lease":
			mode = LeaseMode
		default:
			u.Problem("mode", "want session or lease")
		}
		own = append(own, WithMode(mode))
	}
	listenHost, listen := u.Get("listen_host")
	if listen {
		if mode != LeaseMode {
			u.Problem("listen_host", "for mode=lease only")
		} else if _, err := driver.HostPort(listenHost, "5432"); err != nil {
			u.Problem("listen_host", "%v", err)
		}
	}
	params := u.PassThrough(libpqParams...)
	u.Refuse("dial_timeout", "libpq's connect_timeout (seconds) bounds connecting")
	for _, name := range []string{"host", "hostaddr", "port"} {
		u.Refuse(name, "the hosts go between \"//\" and the database")
	}
	for _, name := range []string{"user", "password"} {
		u.Refuse(name, "the user information goes before the host (postgres://USER:PASSWORD@HOST)")
	}
	for _, name := range []string{"dbname", "database"} {
		u.Refuse(name, "the database is the path (postgres://HOST/DATABASE)")
	}
	if err := u.Done(); err != nil {
		return nil, nil, nil, err
	}
	if listen {
		// The same URL with the listen host, less the pool's parameters,
		// which a single connection would send to the server as settings.
		lu, err := libpqURL(u, listenHost, params, func(name string) bool { return strings.HasPrefix(name, "pool_") })
		if err != nil {
			return nil, nil, nil, u.Bad("%v", err)
		}
		own = append(own, WithListen(lu))
	}
	pu, err := libpqURL(u, strings.Join(u.Hosts, ","), params, func(string) bool { return false })
	if err != nil {
		return nil, nil, nil, u.Bad("%v", err)
	}
	cfg, err := pgxpool.ParseConfig(pu)
	if err != nil {
		// Without the quote of the URL, pgx's message names settings and
		// their values, never the user information (see libpqURL), which
		// a driver.Scrub could only garble: a password "P" masked in
		// "ParseInt".
		return nil, nil, nil, u.Bad("%w", unquoted(err))
	}
	return u, cfg, own, nil
}

// libpqURL writes u, with hosts, for pgx, which reads a URL as libpq
// does: the user information (as driver.ParseURL read it), the database
// and params (less those drop names), in the order of their names, each
// percent-encoded in full (see libpqEscape), so that pgx reads them as
// they were read here and finds nothing to refuse or to quote. Written as
// they came, they were read otherwise: libpq ends the user information at
// a "/", so it took the rest of a password holding one for a path and a
// query (and pgx quoted it in an error); and url.Values.Encode writes a
// space as "+", a plus for libpq, which made the server refuse
// "options=-c%20statement_timeout%3D5000".
func libpqURL(u *driver.URL, hosts string, params url.Values, drop func(name string) bool) (string, error) {
	// pgx refuses a NUL, which no setting can hold, quoting what holds
	// it: refused here, quoting nothing.
	if strings.ContainsRune(u.User+u.Password, 0) {
		return "", errors.New("the user information holds a NUL")
	}
	var b strings.Builder
	b.WriteString("postgres://")
	if u.HasUser {
		b.WriteString(libpqEscape(u.User))
		if u.HasPassword {
			b.WriteString(":" + libpqEscape(u.Password))
		}
		b.WriteByte('@')
	}
	// libpq percent-decodes the hosts too; HostPorts checked the rest of
	// them.
	if _, err := url.PathUnescape(hosts); err != nil {
		return "", errors.New("bad percent-encoding in a host")
	}
	b.WriteString(hosts)
	if db, ok := strings.CutPrefix(u.Path, "/"); ok {
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
	for _, name := range slices.Sorted(maps.Keys(params)) {
		if !drop(name) {
			b.WriteString(sep + libpqEscape(name) + "=" + libpqEscape(params.Get(name)))
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

// libpqEscape percent-encodes every byte of s but letters, digits and
// "-._~".
func libpqEscape(s string) string {
	// QueryEscape writes a space as "+", and a plus as "%2B".
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
