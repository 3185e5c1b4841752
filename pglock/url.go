package pglock

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/backendurl"
)

// OpenTimeout bounds the ping with which OpenURL checks the server.
const OpenTimeout = 5 * time.Second

// OpenURL connects a pool of its own to the PostgreSQL server named by
// rawURL, checks that the server answers, and returns a Backend over the
// pool whose Close also closes the pool. The form is libpq's and pgx's:
//
//	postgres://[user[:password]@]host[:port][,host[:port]...]/database[?options]
//	postgresql://...
//
// Options are this package's "loss_grace" (WithLossGrace) and
// "request_timeout" (WithRequestTimeout), as Go durations, and those of
// pgx and libpq, such as "sslmode", "connect_timeout", "application_name"
// and "pool_max_conns" (see the Schema and cost section of the package
// documentation for sizing the pool). opts are applied after the URL's.
//
// Errors never contain the password: they show the URL redacted.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	// First the reading every backend URL gets (backendurl): "//" and a
	// host are required, so that a mistyped URL never reaches libpq's
	// default (the local server) and the password is never shown.
	bu, err := backendurl.Parse(rawURL)
	if err != nil {
		scheme, _, _ := backendurl.Scheme(rawURL)
		if scheme != "postgresql" {
			scheme = "postgres"
		}
		return nil, fmt.Errorf("%w: pglock: malformed backend URL %q: %v; want %s://[user[:password]@]host[:port][,host[:port]...]/database[?options]",
			distlock.ErrInvalidOption, backendurl.Redact(rawURL), err, scheme)
	}
	for i, h := range bu.Hosts {
		if _, err := backendurl.HostPort(h, "5432"); err != nil {
			return nil, fmt.Errorf("%w: pglock: malformed backend URL %q: host #%d: %v", distlock.ErrInvalidOption, backendurl.Redact(rawURL), i+1, err)
		}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the whole URL, password included: do not wrap it.
		return nil, fmt.Errorf("%w: pglock: malformed backend URL", distlock.ErrInvalidOption)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("%w: pglock: %s: the scheme must be postgres or postgresql", distlock.ErrInvalidOption, u.Redacted())
	}
	shown := u.Redacted()
	password, _ := u.User.Password()
	scrub := func(err error) string {
		s := err.Error()
		if password != "" {
			s = strings.ReplaceAll(s, password, "xxxxx")
			if esc := url.QueryEscape(password); esc != password {
				s = strings.ReplaceAll(s, esc, "xxxxx")
			}
		}
		return s
	}

	q := u.Query()
	var own []Option
	for name, opt := range map[string]func(time.Duration) Option{"loss_grace": WithLossGrace, "request_timeout": WithRequestTimeout} {
		if !q.Has(name) {
			continue
		}
		d, err := time.ParseDuration(q.Get(name))
		if err != nil {
			return nil, fmt.Errorf("%w: pglock: %s: %s %q is not a duration", distlock.ErrInvalidOption, shown, name, q.Get(name))
		}
		own = append(own, opt(d))
		q.Del(name)
	}
	u.RawQuery = q.Encode()

	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		// pgx's error names the URL, redacted.
		return nil, fmt.Errorf("%w: pglock: %s", distlock.ErrInvalidOption, scrub(err))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: pglock: %s: %s", distlock.ErrInvalidOption, shown, scrub(err))
	}
	b, err := New(pool, append(own, opts...)...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, OpenTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w: pglock: %s: %s", distlock.ErrUnavailable, shown, scrub(err))
	}
	b.ownsPool = true
	return b, nil
}
