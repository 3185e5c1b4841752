package pglock

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
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
// opts are applied after the URL's.
//
// Errors never contain the password: they show the URL redacted.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	cfg, own, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	shown := backendurl.Redact(rawURL)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: pglock: %s: %w", distlock.ErrInvalidOption, shown, backendurl.Scrub(err, rawURL))
	}
	b, err := New(pool, append(own, opts...)...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, OpenTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		b.Close()
		pool.Close()
		return nil, fmt.Errorf("%w: pglock: %s: %w", distlock.ErrUnavailable, shown, backendurl.Scrub(err, rawURL))
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
	// First the reading every backend URL gets (backendurl): "//" and a
	// host are required, so that a mistyped URL never reaches libpq's
	// default (the local server) and the password is never shown.
	bu, err := backendurl.Parse(rawURL)
	if err != nil {
		scheme, _, _ := backendurl.Scheme(rawURL)
		if scheme != "postgresql" {
			scheme = "postgres"
		}
		return nil, nil, fmt.Errorf("%w: pglock: malformed backend URL %q: %v; want %s://[user[:password]@]host[:port][,host[:port]...]/database[?options]",
			distlock.ErrInvalidOption, backendurl.Redact(rawURL), err, scheme)
	}
	for i, h := range bu.Hosts {
		if _, err := backendurl.HostPort(h, "5432"); err != nil {
			return nil, nil, fmt.Errorf("%w: pglock: malformed backend URL %q: host #%d: %v", distlock.ErrInvalidOption, backendurl.Redact(rawURL), i+1, err)
		}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the whole URL, password included: do not wrap it.
		return nil, nil, fmt.Errorf("%w: pglock: malformed backend URL %q", distlock.ErrInvalidOption, backendurl.Redact(rawURL))
	}
	shown := backendurl.Redact(rawURL)
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, nil, fmt.Errorf("%w: pglock: %s: the scheme must be postgres or postgresql", distlock.ErrInvalidOption, shown)
	}

	q := u.Query()
	var own []Option
	// In order, so that the same URL always gets the same error.
	for _, name := range slices.Sorted(maps.Keys(durationParams)) {
		if !q.Has(name) {
			continue
		}
		d, err := time.ParseDuration(q.Get(name))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: pglock: %s: %s %q is not a duration", distlock.ErrInvalidOption, shown, name, q.Get(name))
		}
		own = append(own, durationParams[name](d))
		q.Del(name)
	}
	mode := SessionMode
	if q.Has("mode") {
		switch m := q.Get("mode"); m {
		case "session":
		case "lease":
			mode = LeaseMode
		default:
			return nil, nil, fmt.Errorf("%w: pglock: %s: unknown mode %q: want session or lease", distlock.ErrInvalidOption, shown, m)
		}
		q.Del("mode")
		own = append(own, WithMode(mode))
	}
	listenHost := q.Get("listen_host")
	hasListen := q.Has("listen_host")
	q.Del("listen_host")
	u.RawQuery = q.Encode()

	if hasListen {
		if mode != LeaseMode {
			return nil, nil, fmt.Errorf("%w: pglock: %s: listen_host is for mode=lease", distlock.ErrInvalidOption, shown)
		}
		if _, err := backendurl.HostPort(listenHost, "5432"); err != nil {
			return nil, nil, fmt.Errorf("%w: pglock: %s: listen_host: %v", distlock.ErrInvalidOption, shown, err)
		}
		// The same URL with the listen host, less the pool's parameters,
		// which a single connection would send to the server as settings.
		lu := *u
		lu.Host = listenHost
		lq := lu.Query()
		for name := range lq {
			if strings.HasPrefix(name, "pool_") {
				lq.Del(name)
			}
		}
		lu.RawQuery = lq.Encode()
		own = append(own, WithListen(lu.String()))
	}

	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: pglock: %s: %w", distlock.ErrInvalidOption, shown, backendurl.Scrub(err, rawURL))
	}
	return cfg, own, nil
}
