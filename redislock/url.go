package redislock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redisurl"
)

// DefaultDialTimeout bounds the PING with which OpenURL checks the server,
// so that an unreachable server (or a Sentinel set that cannot name a
// master) fails promptly instead of after go-redis's own dial retries.
const DefaultDialTimeout = 5 * time.Second

// Schemes returns the URL schemes OpenURL takes.
func Schemes() []string {
	return []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel"}
}

// urlForm is what this package's URLs look like.
var urlForm = driver.URLForm{
	Pkg:        "redislock",
	Schemes:    Schemes(),
	TLSSchemes: []string{"rediss", "rediss+cluster"},
	Usage: func(scheme string) string {
		switch scheme {
		case "redis+cluster", "rediss+cluster":
			return scheme + "://[user:password@]host[:port][,host[:port]...][?options]"
		case "redis+sentinel":
			return scheme + "://[user:password@]host[:port][,host[:port]...]/master[/db][?options]"
		}
		return scheme + "://[user:password@]host[:port][/db][?options]"
	},
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
// (WithUnordered, a boolean), "eviction_allowed" (WithEvictionAllowed, a
// boolean) and "waiter_liveness" (WithWaiterLiveness, a Go duration); over
// TLS (rediss:// and rediss+cluster:// only) "ca" (a PEM CA bundle
// verifying the server instead of the system's roots) and "cert" and
// "key" (a PEM client certificate and its key, together); and these of
// go-redis's options, for the client: "dial_timeout" (connecting),
// "read_timeout", "write_timeout", "pool_timeout", "min_retry_backoff",
// "max_retry_backoff", "conn_max_idle_time" and "conn_max_lifetime" (Go
// durations), "protocol", "max_retries", "pool_size", "min_idle_conns",
// "max_idle_conns", "max_active_conns" and, for a Cluster,
// "max_redirects" (integers), "pool_fifo" (a boolean) and "client_name".
// Other options, and options given twice, are refused (see
// driver.ParseURL). opts are applied after the URL's options, so they
// win.
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
	*driver.URL
	opts []Option

	// One of these is set.
	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// parseURL reads a Redis URL without I/O. Its errors match
// distlock.ErrInvalidOption and show the URL redacted.
func parseURL(raw string) (*redisURL, error) {
	u, err := driver.ParseURL(raw, urlForm)
	if err != nil {
		return nil, err
	}
	r := &redisURL{URL: u}
	defaultPort := "6379"
	if u.Scheme == "redis+sentinel" {
		defaultPort = "26379"
	}
	addrs, err := u.HostPorts(defaultPort)
	if err != nil {
		return nil, err
	}
	if p, ok := u.Get("prefix"); ok {
		r.opts = append(r.opts, WithPrefix(p))
	}
	if on, _ := u.Bool("unordered"); on {
		r.opts = append(r.opts, WithUnordered())
	}
	if on, _ := u.Bool("eviction_allowed"); on {
		r.opts = append(r.opts, WithEvictionAllowed())
	}
	if d, ok := u.Duration("waiter_liveness"); ok {
		r.opts = append(r.opts, WithWaiterLiveness(d))
	}
	cluster := strings.HasSuffix(u.Scheme, "+cluster")
	q := redisurl.Query(u, cluster)
	if err := u.Done(); err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "redis", "rediss":
		if len(addrs) > 1 {
			return nil, u.Bad("%s:// takes one host; for several use redis+cluster:// or redis+sentinel://", u.Scheme)
		}
		if r.single, err = redisurl.Options(u, q, u.Scheme, addrs[0], u.Path); err != nil {
			return nil, err
		}
	case "redis+cluster", "rediss+cluster":
		if p := strings.Trim(u.Path, "/"); p != "" {
			return nil, u.Bad("a Cluster has no database to choose")
		}
		if r.cluster, err = redisurl.ClusterOptions(u, q, strings.TrimSuffix(u.Scheme, "+cluster"), addrs); err != nil {
			return nil, err
		}
	case "redis+sentinel":
		path := strings.Split(strings.Trim(u.Path, "/"), "/")
		if path[0] == "" || len(path) > 2 {
			return nil, u.Bad("want /master[/db] after the Sentinel addresses")
		}
		master, db := path[0], ""
		if len(path) == 2 {
			db = "/" + path[1]
		}
		o, err := redisurl.Options(u, q, "redis", addrs[0], db)
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

// open makes the client, the Backend with the URL's options and then opts,
// and checks that the server answers.
func (r *redisURL) open(ctx context.Context, opts []Option) (*Backend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var client redis.UniversalClient
	var plainAddrs []string // the servers, when spoken to in plain text
	var tlsAddrs []string   // the servers, when spoken to in TLS
	var tlsConfig *tls.Config
	switch {
	case r.single != nil:
		o := *r.single
		var err error
		if o.TLSConfig, err = r.TLS(o.TLSConfig); err != nil {
			return nil, err
		}
		if o.TLSConfig == nil {
			plainAddrs = []string{o.Addr}
		} else {
			tlsAddrs, tlsConfig = []string{o.Addr}, o.TLSConfig
		}
		client = redis.NewClient(&o)
	case r.cluster != nil:
		o := *r.cluster
		var err error
		if o.TLSConfig, err = r.TLS(o.TLSConfig); err != nil {
			return nil, err
		}
		if o.TLSConfig == nil {
			plainAddrs = o.Addrs
		} else {
			tlsAddrs, tlsConfig = o.Addrs, o.TLSConfig
		}
		client = redis.NewClusterClient(&o)
	default:
		o := *r.failover
		client = redis.NewFailoverClient(&o)
	}

	b, err := New(client, append(r.opts, opts...)...)
	if err != nil {
		_ = client.Close()
		return nil, err
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
		if tlsAddrs != nil && (driver.TLSClosedAtOnce(err) || errors.Is(err, syscall.EPIPE)) {
			// A server that refused the client's certificate after a TLS
			// 1.3 handshake may have its alert lost to the reset that met
			// the PING: ask again, writing nothing.
			tctx, cancel := context.WithTimeout(ctx, time.Second)
			terr := driver.TLSRefusal(tctx, tlsAddrs, tlsConfig)
			cancel()
			if terr != nil {
				return nil, r.Fail(nil, "TLS", terr)
			}
		}
		if plainAddrs != nil && driver.TLSClosedAtOnce(err) {
			// A TLS server hangs up on plain text: say so rather than EOF.
			tctx, cancel := context.WithTimeout(ctx, time.Second)
			err := r.ExpectsTLS(tctx, plainAddrs, redisurl.Hello, nil)
			cancel()
			if err != nil {
				return nil, err
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", r.Fail(driver.ErrUnavailable, "PING", err), context.Cause(ctx))
		}
		return nil, r.Fail(driver.ErrUnavailable, "PING", err)
	}
	return b, nil
}
