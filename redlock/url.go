package redlock

// OpenURL: the redlock:// URL form, read without I/O, and the clients it
// names.

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/backendurl"
	"github.com/distlock/distlock/internal/tlsfiles"
)

// OpenTimeout bounds the PING with which OpenURL checks the nodes, and
// each node's part of a listing.
const OpenTimeout = 5 * time.Second

// Schemes returns the URL schemes OpenURL takes.
func Schemes() []string { return []string{"redlock", "redlocks"} }

// urlForm names the form of a URL of scheme, for errors.
func urlForm(scheme string) string {
	if !slices.Contains(Schemes(), scheme) {
		scheme = "redlock"
	}
	return "want " + scheme + "://[user:password@]host[:port],host[:port],...[/db][?options]"
}

// OpenURL connects to the Redis servers named by rawURL, checks that a
// majority of them answer PING, and returns a Backend over them whose Close
// also closes the connections. Forms:
//
//	redlock://[user:password@]host[:port],host[:port],...[/db][?options]
//	redlocks://...                                                  (TLS)
//
// The hosts are the independent servers (at least one; an odd number,
// usually 3 or 5, is what a majority is for), each with the default port
// 6379; IPv6 hosts are written in brackets. The credentials and the db
// (default 0) are those of every server. The user information is
// everything before the last "@", percent-decoded, as for redis://.
//
// Options are this package's "prefix" (WithPrefix), "node_timeout"
// (WithNodeTimeout) and "max_ttl" (WithMaxTTL), both Go durations; over
// TLS "ca", "cert" and "key" (PEM files, as for rediss://); and go-redis's
// own URL options such as "dial_timeout", "read_timeout", "pool_size" and
// "max_retries", for every server. opts are applied after the URL's
// options, so they win.
//
// Errors never contain the password: they show the URL redacted. A
// malformed URL gives an error matching distlock.ErrInvalidOption; fewer
// than a majority of servers answering, one matching
// distlock.ErrUnavailable that names the servers that did not.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return u.open(ctx, opts)
}

// redlockURL is what a redlock URL says, read without I/O.
type redlockURL struct {
	raw, shown    string
	opts          []Option
	ca, cert, key string
	nodes         []*redis.Options
}

// parseURL reads a redlock URL without I/O. Its errors match
// distlock.ErrInvalidOption and show the URL redacted.
func parseURL(raw string) (*redlockURL, error) {
	r := &redlockURL{raw: raw, shown: backendurl.Redact(raw)}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: redlock: malformed backend URL %q: %s", distlock.ErrInvalidOption, r.shown, fmt.Sprintf(format, args...))
	}
	u, err := backendurl.Parse(raw)
	if err != nil {
		scheme, _, _ := backendurl.Scheme(raw)
		return nil, bad("%v; %s", err, urlForm(scheme))
	}
	if !slices.Contains(Schemes(), u.Scheme) {
		return nil, bad("unsupported scheme; %s (redlocks:// for TLS)", urlForm(""))
	}
	q := u.Query
	if err := r.ourOptions(q); err != nil {
		return nil, bad("%v", err)
	}
	tlsScheme := u.Scheme == "redlocks"
	if (r.ca != "" || r.cert != "" || r.key != "") && !tlsScheme {
		return nil, bad("options ca, cert and key need redlocks://")
	}
	if q.Has("addr") {
		return nil, bad("list the hosts before the path, separated by commas, not as addr parameters")
	}
	scheme := "redis"
	if tlsScheme {
		scheme = "rediss"
	}
	seen := map[string]bool{}
	for i, h := range u.Hosts {
		a, err := backendurl.HostPort(h, "6379")
		if err != nil {
			return nil, bad("host #%d: %v", i+1, err)
		}
		if seen[a] {
			return nil, bad("host #%d: %s is named twice", i+1, a)
		}
		seen[a] = true
		// go-redis parses the common options and the db, from a URL
		// without user information, so that its errors cannot quote a
		// secret.
		o, err := redis.ParseURL((&url.URL{Scheme: scheme, Host: a, Path: u.Path, RawQuery: q.Encode()}).String())
		if err != nil {
			return nil, bad("%v", err)
		}
		o.Username, o.Password = u.User, u.Password
		o.ContextTimeoutEnabled = true
		r.nodes = append(r.nodes, o)
	}
	if _, err := newConfig(r.opts); err != nil {
		return nil, bad("%v", strings.TrimPrefix(err.Error(), distlock.ErrInvalidOption.Error()+": redlock: "))
	}
	return r, nil
}

// ourOptions takes this package's options out of q.
func (r *redlockURL) ourOptions(q url.Values) error {
	if q.Has("prefix") {
		r.opts = append(r.opts, WithPrefix(q.Get("prefix")))
		q.Del("prefix")
	}
	for name, opt := range map[string]func(time.Duration) Option{"node_timeout": WithNodeTimeout, "max_ttl": WithMaxTTL} {
		if !q.Has(name) {
			continue
		}
		d, err := time.ParseDuration(q.Get(name))
		if err != nil {
			return errors.New("option " + name + ": not a duration")
		}
		if name == "node_timeout" && d <= 0 {
			return errors.New("option node_timeout: not positive")
		}
		r.opts = append(r.opts, opt(d))
		q.Del(name)
	}
	r.ca, r.cert, r.key = q.Get("ca"), q.Get("cert"), q.Get("key")
	q.Del("ca")
	q.Del("cert")
	q.Del("key")
	return nil
}

// open makes the clients and the Backend, and checks that a majority of
// the servers answer.
func (r *redlockURL) open(ctx context.Context, opts []Option) (*Backend, error) {
	fail := func(sentinel error, what string, err error) error {
		msg := "redlock: " + r.shown + ": " + what
		if err != nil {
			return fmt.Errorf("%w: %s: %w", sentinel, msg, backendurl.Scrub(err, r.raw))
		}
		return fmt.Errorf("%w: %s", sentinel, msg)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var nodes []Node
	var clients []*redis.Client
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	for _, base := range r.nodes {
		o := *base
		if r.ca != "" || r.cert != "" || r.key != "" {
			cfg, err := tlsfiles.Config(o.TLSConfig, r.ca, r.cert, r.key)
			if err != nil {
				closeAll()
				return nil, fail(distlock.ErrInvalidOption, "TLS options", err)
			}
			o.TLSConfig = cfg
		}
		c := redis.NewClient(&o)
		clients = append(clients, c)
		nodes = append(nodes, c)
	}
	b, err := New(nodes, append(r.opts, opts...)...)
	if err != nil {
		closeAll()
		return nil, fail(distlock.ErrInvalidOption, "options", err)
	}
	for _, c := range clients {
		b.owned = append(b.owned, c.Close)
	}
	res := each(ctx, b, nil, OpenTimeout, func(ctx context.Context, n Node) (string, error) {
		return n.(*redis.Client).Ping(ctx).Result()
	})
	up := 0
	why := make([]string, len(res))
	for i, x := range res {
		if x.err != nil {
			why[i] = backendurl.Scrub(x.err, r.raw).Error()
			continue
		}
		up++
	}
	if up < b.maj {
		_ = b.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", fail(distlock.ErrUnavailable, "PING", errors.New(b.nodeErrors(why))), context.Cause(ctx))
		}
		return nil, fail(distlock.ErrUnavailable, fmt.Sprintf("PING: %d of %d servers answered, %d needed", up, len(res), b.maj), errors.New(b.nodeErrors(why)))
	}
	return b, nil
}
