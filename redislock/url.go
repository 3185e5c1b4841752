package redislock

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redisurl"
)

// DefaultDialTimeout bounds the PING with which OpenURL checks the server,
// so that an unreachable server (or a Sentinel set that cannot name a
// master) fails promptly instead of after go-redis's own dial retries.
const DefaultDialTimeout = 5 * time.Second

// Schemes returns the URL schemes OpenURL takes.
func Schemes() []string {
	return []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel"}
}

// urlForm names the form of a URL of scheme, for errors.
func urlForm(scheme string) string {
	switch scheme {
	case "redis", "rediss":
		return "want " + scheme + "://[user:password@]host[:port][/db][?options]"
	case "redis+cluster", "rediss+cluster":
		return "want " + scheme + "://[user:password@]host[:port][,host[:port]...][?options]"
	case "redis+sentinel":
		return "want " + scheme + "://[user:password@]host[:port][,host[:port]...]/master[/db][?options]"
	}
	return "want one of " + strings.Join(Schemes(), ", ") + ", such as redis://host:6379/0"
}

// OpenURL connects to the Redis named by rawURL, checks it answers PING, and
// returns a Backend over it whose Close also closes the connection. Forms:
//
//	redis://[user:password@]host[:port][/db][?options]
//	rediss://[user:password@]host[:port][/db][?options]          (TLS)
//	redis+cluster://[user:password@]host:port[,host:port...][?options]
//	rediss+cluster://...                                          (TLS)
//	redis+sentinel://[user:password@]host:port[,host:port...]/master[/db][?options]
//
// Every form names its hosts: a URL without "//", or without a host, is
// refused. In the Cluster form the hosts are some of the Cluster's nodes,
// from which the client learns the others. In the Sentinel form the hosts
// are Sentinels, master is the monitored primary's name, and the
// credentials authenticate to the primary (the Sentinels are asked without
// credentials). The default port is 6379 (26379 for Sentinels); IPv6
// hosts are written in brackets; the default db is 0 (a Cluster has no
// other). The user information is everything before the last "@" of the
// URL, percent-decoded: a password may hold any character as it is, and
// "@" in the path or the options must be written %40.
//
// Options are this package's "prefix" (WithPrefix), "unordered"
// (WithUnordered, a boolean),
// "eviction_allowed" (WithEvictionAllowed, a boolean) and
// "waiter_liveness" (WithWaiterLiveness, a Go duration); over TLS
// (rediss:// and rediss+cluster://) "ca" (a PEM CA bundle verifying the
// server instead of the system's roots) and "cert" and "key" (a PEM client
// certificate and its key, together); and go-redis's own URL options such
// as "dial_timeout", "read_timeout", "write_timeout", "pool_size" and
// "max_retries". opts are applied after the URL's options, so they win.
//
// Errors never contain the password: they show the URL redacted (see
// the backends package). A malformed URL gives an error matching
// distlock.ErrInvalidOption, an unreachable server one matching
// distlock.ErrUnavailable.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return u.open(ctx, opts)
}

// redisURL is what a Redis URL says, read without I/O.
type redisURL struct {
	*redisurl.URL
	opts []Option

	// One of these is set.
	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// urlForms is what this package's URLs look like.
var urlForms = redisurl.Form{
	Pkg:        "redislock",
	Schemes:    Schemes(),
	TLSSchemes: []string{"rediss", "rediss+cluster"},
	Want:       urlForm,
}

// parseURL reads a Redis URL without I/O. Its errors match
// distlock.ErrInvalidOption and show the URL redacted.
func parseURL(raw string) (*redisURL, error) {
	r := &redisURL{}
	u, err := redisurl.Read(urlForms, raw, r.ourOptions)
	if err != nil {
		return nil, err
	}
	r.URL = u
	defaultPort := "6379"
	if u.Scheme == "redis+sentinel" {
		defaultPort = "26379"
	}
	addrs, err := u.Addrs(defaultPort)
	if err != nil {
		return nil, err
	}
	if err := u.NoAddrOption(); err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "redis", "rediss":
		if len(addrs) > 1 {
			return nil, u.Bad("%s:// takes one host; for several use redis+cluster:// or redis+sentinel://", u.Scheme)
		}
		o, err := u.Options(u.Scheme, addrs[0], u.Path)
		if err != nil {
			return nil, err
		}
		r.single = o
	case "redis+cluster", "rediss+cluster":
		if p := strings.Trim(u.Path, "/"); p != "" {
			return nil, u.Bad("a Cluster has no database to choose")
		}
		for _, a := range addrs[1:] {
			u.Query.Add("addr", a)
		}
		o, err := redis.ParseClusterURL(u.GoRedisURL(strings.TrimSuffix(u.Scheme, "+cluster"), addrs[0], ""))
		if err != nil {
			return nil, u.Bad("%v", err)
		}
		o.Username, o.Password = u.User, u.Password
		r.cluster = o
	case "redis+sentinel":
		path := strings.Split(strings.Trim(u.Path, "/"), "/")
		if path[0] == "" || len(path) > 2 {
			return nil, u.Bad("want /master[/db] after the Sentinel addresses")
		}
		master, db := path[0], ""
		if len(path) == 2 {
			db = "/" + path[1]
		}
		o, err := u.Options("redis", addrs[0], db)
		if err != nil {
			return nil, err
		}
		r.failover = &redis.FailoverOptions{
			MasterName:      master,
			SentinelAddrs:   addrs,
			Username:        u.User,
			Password:        u.Password,
			DB:              o.DB,
			Protocol:        o.Protocol,
			ClientName:      o.ClientName,
			MaxRetries:      o.MaxRetries,
			MinRetryBackoff: o.MinRetryBackoff,
			MaxRetryBackoff: o.MaxRetryBackoff,
			DialTimeout:     o.DialTimeout,
			ReadTimeout:     o.ReadTimeout,
			WriteTimeout:    o.WriteTimeout,
			PoolFIFO:        o.PoolFIFO,
			PoolSize:        o.PoolSize,
			PoolTimeout:     o.PoolTimeout,
			MinIdleConns:    o.MinIdleConns,
			MaxIdleConns:    o.MaxIdleConns,
			MaxActiveConns:  o.MaxActiveConns,
			ConnMaxIdleTime: o.ConnMaxIdleTime,
			ConnMaxLifetime: o.ConnMaxLifetime,
		}
	}
	return r, nil
}

// newBackend is New with the options in a slice.
func newBackend(client redis.UniversalClient, opts []Option) (*Backend, error) {
	return New(client, opts...)
}

// ourOptions takes this package's options out of q.
func (r *redisURL) ourOptions(q url.Values) error {
	if p, ok := redisurl.String(q, "prefix"); ok {
		r.opts = append(r.opts, WithPrefix(p))
	}
	for _, b := range []struct {
		name string
		opt  Option
	}{{"unordered", WithUnordered()}, {"eviction_allowed", WithEvictionAllowed()}} {
		on, _, err := redisurl.Bool(q, b.name)
		if err != nil {
			return err
		}
		if on {
			r.opts = append(r.opts, b.opt)
		}
	}
	d, ok, err := redisurl.Duration(q, "waiter_liveness")
	if err != nil {
		return err
	}
	if ok {
		r.opts = append(r.opts, WithWaiterLiveness(d))
	}
	return nil
}

// open makes the client, the Backend with the URL's options and then opts,
// and checks that the server answers.
func (r *redisURL) open(ctx context.Context, opts []Option) (*Backend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var client redis.UniversalClient
	var plainAddr string // the first server, when spoken to in plain text
	switch {
	case r.single != nil:
		o := *r.single
		var err error
		if o.TLSConfig, err = r.TLS(o.TLSConfig); err != nil {
			return nil, err
		}
		if o.TLSConfig == nil {
			plainAddr = o.Addr
		}
		client = redis.NewClient(&o)
	case r.cluster != nil:
		o := *r.cluster
		var err error
		if o.TLSConfig, err = r.TLS(o.TLSConfig); err != nil {
			return nil, err
		}
		if o.TLSConfig == nil {
			plainAddr = o.Addrs[0]
		}
		client = redis.NewClusterClient(&o)
	default:
		o := *r.failover
		client = redis.NewFailoverClient(&o)
	}

	b, err := newBackend(client, append(r.opts, opts...))
	if err != nil {
		_ = client.Close()
		return nil, r.Fail(driver.ErrInvalidOption, "options", err)
	}
	b.ownsClient = true

	pctx, cancel := context.WithTimeout(ctx, DefaultDialTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = b.Close()
		if driver.IsTLSFailure(err) {
			// A certificate problem is not worth retrying.
			return nil, r.Fail(nil, "TLS", err)
		}
		if plainAddr != "" && driver.TLSClosedAtOnce(err) {
			// A TLS server hangs up on plain text: say so rather than EOF.
			tctx, cancel := context.WithTimeout(ctx, time.Second)
			isTLS := driver.SpeaksTLS(tctx, plainAddr, nil)
			cancel()
			if isTLS {
				return nil, r.Fail(driver.ErrInvalidOption, "the server at "+plainAddr+" expects TLS: use rediss:// or rediss+cluster://", nil)
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", r.Fail(driver.ErrUnavailable, "PING", err), context.Cause(ctx))
		}
		return nil, r.Fail(driver.ErrUnavailable, "PING", err)
	}
	return b, nil
}
