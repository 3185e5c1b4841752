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
	"github.com/distlock/distlock/internal/redisurl"
)

// OpenTimeout bounds the PING with which OpenURL checks the nodes, and
// each node's part of a listing (ctx's deadline, if sooner, bounds them
// too).
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
// also closes the connections. It returns as soon as a majority answered:
// a node that is down or paused does not hold it up. Forms:
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
// (WithNodeTimeout: replies that come a second or more after a round's
// first request do not count toward a token, whatever the timeout) and
// "max_ttl" (WithMaxTTL), both Go durations; over
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
	*redisurl.URL
	opts  []Option
	nodes []*redis.Options
}

// urlForms is what this package's URLs look like.
var urlForms = redisurl.Form{
	Pkg:           "redlock",
	Schemes:       Schemes(),
	TLSSchemes:    []string{"redlocks"},
	Want:          urlForm,
	UnknownScheme: " (redlocks:// for TLS)",
}

// parseURL reads a redlock URL without I/O. Its errors match
// distlock.ErrInvalidOption and show the URL redacted.
func parseURL(raw string) (*redlockURL, error) {
	r := &redlockURL{}
	u, err := redisurl.Read(urlForms, raw, r.ourOptions)
	if err != nil {
		return nil, err
	}
	r.URL = u
	if err := u.NoAddrOption(); err != nil {
		return nil, err
	}
	scheme := "redis"
	if u.Scheme == "redlocks" {
		scheme = "rediss"
	}
	seen := map[string]bool{}
	for i := range u.Hosts {
		a, err := u.Addr(i, "6379")
		if err != nil {
			return nil, err
		}
		if seen[a] {
			return nil, u.Bad("host #%d: %s is named twice", i+1, a)
		}
		seen[a] = true
		o, err := u.Options(scheme, a, u.Path)
		if err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled = true
		r.nodes = append(r.nodes, o)
	}
	if _, err := newConfig(r.opts); err != nil {
		return nil, u.Bad("%v", strings.TrimPrefix(err.Error(), distlock.ErrInvalidOption.Error()+": redlock: "))
	}
	return r, nil
}

// ourOptions takes this package's options out of q.
func (r *redlockURL) ourOptions(q url.Values) error {
	if p, ok := redisurl.String(q, "prefix"); ok {
		r.opts = append(r.opts, WithPrefix(p))
	}
	for _, o := range []struct {
		name string
		opt  func(time.Duration) Option
	}{{"node_timeout", WithNodeTimeout}, {"max_ttl", WithMaxTTL}} {
		d, ok, err := redisurl.Duration(q, o.name)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if o.name == "node_timeout" && d <= 0 {
			return errors.New("option node_timeout: not positive")
		}
		r.opts = append(r.opts, o.opt(d))
	}
	return nil
}

// open makes the clients and the Backend, and checks that a majority of
// the servers answer.
func (r *redlockURL) open(ctx context.Context, opts []Option) (*Backend, error) {
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
		cfg, err := r.TLS(o.TLSConfig)
		if err != nil {
			closeAll()
			return nil, err
		}
		o.TLSConfig = cfg
		c := redis.NewClient(&o)
		clients = append(clients, c)
		nodes = append(nodes, c)
	}
	b, err := New(nodes, append(r.opts, opts...)...)
	if err != nil {
		closeAll()
		return nil, r.Fail(distlock.ErrInvalidOption, "options", err)
	}
	for _, c := range clients {
		b.owned = append(b.owned, c.Close)
	}
	// A majority's PING is all an opening needs.
	q := quorum[string]{
		straggle: func(time.Duration) time.Duration { return 0 },
		decided:  func([]reply[string], []bool) bool { return true },
	}
	res := eachQuorum(ctx, b, OpenTimeout, q, func(ctx context.Context, n Node) (string, error) {
		return n.(*redis.Client).Ping(ctx).Result()
	})
	up := 0
	why := make([]string, len(res))
	for i, x := range res {
		if x.err != nil {
			why[i] = r.Scrub(x.err).Error()
			continue
		}
		up++
	}
	if up < b.maj {
		_ = b.Close()
		var nodes error = errors.New(b.nodeErrors(why))
		if ctx.Err() != nil {
			// The nodes' errors say that ctx ended; the error matches it.
			nodes = quietCause{nodes.Error(), context.Cause(ctx)}
		}
		return nil, r.Fail(distlock.ErrUnavailable, fmt.Sprintf("PING: %d of %d servers answered, %d needed", up, len(res), b.maj), nodes)
	}
	return b, nil
}
