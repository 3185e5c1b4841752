package redlock

// OpenURL: the redlock:// URL form, read without I/O, and the clients it
// names.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redisurl"
)

// DefaultDialTimeout bounds the PING with which OpenURL checks the nodes
// (ctx's deadline, if sooner, bounds it too).
const DefaultDialTimeout = 5 * time.Second

// Schemes returns the URL schemes OpenURL takes.
func Schemes() []string { return []string{"redlock", "redlocks"} }

// urlForm is what this package's URLs look like.
var urlForm = driver.URLForm{
	Pkg:        "redlock",
	Schemes:    Schemes(),
	TLSSchemes: []string{"redlocks"},
	Usage: func(scheme string) string {
		return scheme + "://[user:password@]host[:port],host[:port],...[/db][?options]"
	},
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
// Options are this package's "prefix" (WithPrefix), "request_timeout"
// (WithRequestTimeout: how long each request waits for each server;
// replies that come a second or more after a round's first request do not
// count toward a token, whatever the timeout) and "max_ttl" (WithMaxTTL),
// both Go durations; over TLS (redlocks:// only) "ca", "cert" and "key"
// (PEM files, as for rediss://); and go-redis's options that
// redislock.OpenURL takes for a client of one server, such as
// "dial_timeout" (connecting), "read_timeout", "pool_size" and
// "max_retries", for every server. Other options, and options given
// twice, are refused (see driver.ParseURL); "node_timeout" is now
// "request_timeout". opts are applied after the URL's options, so they
// win.
//
// Errors never contain the password: they show the URL redacted. A
// malformed URL gives an error matching distlock.ErrInvalidOption; fewer
// than a majority of servers answering, one matching
// distlock.ErrUnavailable that names the servers that did not, unless
// they expect TLS, which redlock:// spoke to them in plain text: then one
// matching distlock.ErrInvalidOption that says to use redlocks://.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return u.open(ctx, opts)
}

// redlockURL is what a redlock URL says, read without I/O.
type redlockURL struct {
	*driver.URL
	opts  []Option
	nodes []*redis.Options
}

// parseURL reads a redlock URL without I/O. Its errors match
// distlock.ErrInvalidOption and show the URL redacted.
func parseURL(raw string) (*redlockURL, error) {
	u, err := driver.ParseURL(raw, urlForm)
	if err != nil {
		return nil, err
	}
	r := &redlockURL{URL: u}
	addrs, err := u.HostPorts("6379")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, a := range addrs {
		if seen[a] {
			return nil, u.Bad("host #%d: %s is named twice", i+1, a)
		}
		seen[a] = true
	}
	if p, ok := u.Get("prefix"); ok {
		r.opts = append(r.opts, WithPrefix(p))
	}
	if d, ok := u.PositiveDuration("request_timeout"); ok {
		r.opts = append(r.opts, WithRequestTimeout(d))
	}
	if d, ok := u.Duration("max_ttl"); ok {
		r.opts = append(r.opts, WithMaxTTL(d))
	}
	u.Refuse("node_timeout", "renamed request_timeout")
	q := redisurl.Query(u, false)
	if err := u.Done(); err != nil {
		return nil, err
	}
	scheme := "redis"
	if u.Scheme == "redlocks" {
		scheme = "rediss"
	}
	for _, a := range addrs {
		o, err := redisurl.Options(u, q, scheme, a, u.Path)
		if err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled = true
		r.nodes = append(r.nodes, o)
	}
	return r, nil
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
		return nil, err
	}
	for _, c := range clients {
		b.owned = append(b.owned, c.Close)
	}
	// A majority's PING is all an opening needs.
	q := quorum[string]{
		straggle: func(time.Duration) time.Duration { return 0 },
		decided:  func([]reply[string], []bool) bool { return true },
	}
	res := eachQuorum(ctx, b, DefaultDialTimeout, q, func(ctx context.Context, n Node) (string, error) {
		return n.(*redis.Client).Ping(ctx).Result()
	})
	up := 0
	why := make([]string, len(res))
	var hungUp []string // servers that closed a plain-text connection at once
	for i, x := range res {
		if x.err != nil {
			why[i] = r.Scrub(x.err).Error()
			if driver.TLSClosedAtOnce(x.err) {
				hungUp = append(hungUp, r.nodes[i].Addr)
			}
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
		} else if len(hungUp) > 0 {
			// TLS servers hang up on plain text: say so rather than EOF.
			tctx, cancel := context.WithTimeout(ctx, time.Second)
			err := r.ExpectsTLS(tctx, hungUp, redisurl.Hello, nil)
			cancel()
			if err != nil {
				return nil, err
			}
		}
		return nil, r.Fail(driver.ErrUnavailable, fmt.Sprintf("PING: %d of %d servers answered, %d needed", up, len(res), b.maj), nodes)
	}
	return b, nil
}
