package redislock

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/tlsfiles"
)

// OpenTimeout bounds the PING with which OpenURL checks the server, so that
// an unreachable server (or a Sentinel set that cannot name a master) fails
// promptly instead of after go-redis's own dial retries.
const OpenTimeout = 5 * time.Second

// OpenURL connects to the Redis named by rawURL, checks it answers PING, and
// returns a Backend over it whose Close also closes the connection. Forms:
//
//	redis://[user:password@]host[:port][/db][?options]
//	rediss://[user:password@]host[:port][/db][?options]          (TLS)
//	redis+cluster://[user:password@]host:port[,host:port...][?options]
//	rediss+cluster://...                                          (TLS)
//	redis+sentinel://[user:password@]host:port[,host:port...]/master[/db][?options]
//
// In the Cluster form the hosts are some of the Cluster's nodes, from which
// the client learns the others. In the Sentinel form the hosts are
// Sentinels, master is the monitored primary's name, and the credentials
// authenticate to the primary (the Sentinels are asked without
// credentials). The default port is 6379 (26379 for Sentinels); the
// default db is 0 (a Cluster has no other).
//
// Options are this package's "prefix" (WithPrefix), "fair" (WithFair, a
// boolean), "eviction_allowed" (WithEvictionAllowed, a boolean) and
// "waiter_liveness" (WithWaiterLiveness, a Go duration); over TLS
// (rediss:// and rediss+cluster://) "ca" (a PEM CA bundle verifying the
// server instead of the system's roots) and "cert" and "key" (a PEM client
// certificate and its key, together); and go-redis's own URL options such
// as "dial_timeout", "read_timeout", "write_timeout", "pool_size" and
// "max_retries".
//
// Errors never contain the password: they show the URL redacted.
func OpenURL(ctx context.Context, rawURL string) (*Backend, error) {
	// The node lists of the Cluster and Sentinel forms are not one URL
	// host (IPv6 nodes, nodes without a port): take them out first.
	rawURL, nodes := splitNodes(rawURL)
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the whole URL, password included: do not wrap it.
		return nil, fmt.Errorf("%w: redislock: malformed backend URL", distlock.ErrInvalidOption)
	}
	shown := u.Redacted()
	if nodes != nil {
		shown = strings.Replace(shown, nodesPlaceholder, strings.Join(nodes, ","), 1)
	}
	password, _ := u.User.Password()
	fail := func(sentinel error, what string, err error) error {
		msg := what
		if err != nil {
			msg += ": " + scrubbed(err, password)
		}
		return fmt.Errorf("%w: redislock: %s: %s", sentinel, shown, msg)
	}

	q := u.Query()
	var opts []Option
	if q.Has("prefix") {
		opts = append(opts, WithPrefix(q.Get("prefix")))
		q.Del("prefix")
	}
	if q.Has("fair") {
		fair, err := strconv.ParseBool(q.Get("fair"))
		if err != nil {
			return nil, fail(distlock.ErrInvalidOption, "option fair", err)
		}
		if fair {
			opts = append(opts, WithFair())
		}
		q.Del("fair")
	}
	if q.Has("eviction_allowed") {
		ok, err := strconv.ParseBool(q.Get("eviction_allowed"))
		if err != nil {
			return nil, fail(distlock.ErrInvalidOption, "option eviction_allowed", err)
		}
		if ok {
			opts = append(opts, WithEvictionAllowed())
		}
		q.Del("eviction_allowed")
	}
	if q.Has("waiter_liveness") {
		d, err := time.ParseDuration(q.Get("waiter_liveness"))
		if err != nil {
			return nil, fail(distlock.ErrInvalidOption, "option waiter_liveness", err)
		}
		opts = append(opts, WithWaiterLiveness(d))
		q.Del("waiter_liveness")
	}
	ca, cert, key := q.Get("ca"), q.Get("cert"), q.Get("key")
	q.Del("ca")
	q.Del("cert")
	q.Del("key")
	withFiles := ca != "" || cert != "" || key != ""
	u.RawQuery = q.Encode()

	// withTLSFiles completes the TLS settings of a tlsScheme URL with the
	// ca, cert and key files; other schemes must not name them.
	withTLSFiles := func(tlsScheme string, base *tls.Config) (*tls.Config, error) {
		if !withFiles {
			return base, nil
		}
		if u.Scheme != tlsScheme {
			return nil, fail(distlock.ErrInvalidOption, "options ca, cert and key need rediss:// or rediss+cluster://", nil)
		}
		cfg, err := tlsfiles.Config(base, ca, cert, key)
		if err != nil {
			return nil, fail(distlock.ErrInvalidOption, "TLS options", err)
		}
		return cfg, nil
	}

	var client redis.UniversalClient
	var plainAddr string // the first server, when spoken to in plain text
	switch u.Scheme {
	case "redis", "rediss":
		o, err := redis.ParseURL(u.String())
		if err != nil {
			return nil, fail(distlock.ErrInvalidOption, "invalid URL", err)
		}
		if o.TLSConfig, err = withTLSFiles("rediss", o.TLSConfig); err != nil {
			return nil, err
		}
		if o.TLSConfig == nil {
			plainAddr = o.Addr
		}
		client = redis.NewClient(o)
	case "redis+cluster", "rediss+cluster":
		co, err := parseCluster(u, nodes)
		if err != nil {
			return nil, fail(distlock.ErrInvalidOption, "invalid URL", err)
		}
		if co.TLSConfig, err = withTLSFiles("rediss+cluster", co.TLSConfig); err != nil {
			return nil, err
		}
		if co.TLSConfig == nil {
			plainAddr = co.Addrs[0]
		}
		client = redis.NewClusterClient(co)
	case "redis+sentinel":
		if withFiles {
			return nil, fail(distlock.ErrInvalidOption, "options ca, cert and key are for rediss:// and rediss+cluster:// only", nil)
		}
		fo, err := parseSentinel(u, nodes)
		if err != nil {
			return nil, fail(distlock.ErrInvalidOption, "invalid URL", err)
		}
		client = redis.NewFailoverClient(fo)
	default:
		return nil, fail(distlock.ErrInvalidOption, "unsupported scheme (want redis, rediss, redis+cluster, rediss+cluster or redis+sentinel)", nil)
	}

	b, err := New(client, opts...)
	if err != nil {
		_ = client.Close()
		return nil, fail(distlock.ErrInvalidOption, "options", err)
	}
	b.ownsClient = true
	pctx, cancel := context.WithTimeout(ctx, OpenTimeout)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = client.Close()
		if tlsfiles.IsFailure(err) {
			// A certificate problem is not worth retrying.
			return nil, fmt.Errorf("redislock: %s: TLS: %s", shown, scrubbed(err, password))
		}
		if plainAddr != "" && tlsfiles.ClosedAtOnce(err) {
			// A TLS server hangs up on plain text: say so rather than EOF.
			tctx, cancel := context.WithTimeout(ctx, time.Second)
			isTLS := tlsfiles.SpeaksTLS(tctx, plainAddr, nil)
			cancel()
			if isTLS {
				return nil, fail(distlock.ErrInvalidOption, "the server at "+plainAddr+" expects TLS: use rediss:// or rediss+cluster://", nil)
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", fail(distlock.ErrUnavailable, "PING", err), context.Cause(ctx))
		}
		return nil, fail(distlock.ErrUnavailable, "PING", err)
	}
	return b, nil
}

// nodesPlaceholder stands for the node list of a Cluster or Sentinel URL
// while the rest of it is parsed as a URL.
const nodesPlaceholder = "distlock-nodes"

// splitNodes returns a redis+cluster, rediss+cluster or redis+sentinel URL
// with its comma-separated node list replaced by nodesPlaceholder, and the
// nodes; other URLs are returned as they are, with nil. The user
// information is everything before the last "@" of the URL, as url.Parse
// reads it.
func splitNodes(raw string) (string, []string) {
	scheme, rest, ok := strings.Cut(raw, "://")
	switch {
	case !ok:
		return raw, nil
	case scheme != "redis+cluster" && scheme != "rediss+cluster" && scheme != "redis+sentinel":
		return raw, nil
	}
	start := 0
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		start = at + 1
	}
	end := len(rest)
	if i := strings.IndexAny(rest[start:], "/?#"); i >= 0 {
		end = start + i
	}
	return scheme + "://" + rest[:start] + nodesPlaceholder + rest[end:], strings.Split(rest[start:end], ",")
}

// nodeAddrs checks nodes ("host", "host:port", "[v6]" or "[v6]:port") and
// returns them as host:port, with defaultPort where none is given.
func nodeAddrs(nodes []string, defaultPort string) ([]string, error) {
	var addrs []string
	for _, h := range nodes {
		if h == "" {
			return nil, fmt.Errorf("empty node address")
		}
		if strings.HasSuffix(h, "]") || !strings.Contains(h, ":") {
			h = net.JoinHostPort(strings.Trim(h, "[]"), defaultPort)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return nil, fmt.Errorf("node %q is not host:port", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("node %q: port not in 1-65535", h)
		}
		addrs = append(addrs, h)
	}
	return addrs, nil
}

// proxyURL is u without its user information (so that no error of
// go-redis's parsers can quote the password), with scheme, host, path and
// query as given, for borrowing go-redis's parsing of the common options.
func proxyURL(scheme, host, path string, q url.Values) string {
	return (&url.URL{Scheme: scheme, Host: host, Path: path, RawQuery: q.Encode()}).String()
}

// parseCluster turns a redis+cluster or rediss+cluster URL into
// ClusterOptions through go-redis's own cluster URL parser.
func parseCluster(u *url.URL, nodes []string) (*redis.ClusterOptions, error) {
	addrs, err := nodeAddrs(nodes, "6379")
	if err != nil {
		return nil, err
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		return nil, fmt.Errorf("a Cluster has no database to choose (path %q)", u.Path)
	}
	q := u.Query()
	if q.Has("addr") {
		return nil, fmt.Errorf("list the nodes before the path, separated by commas, not as addr parameters")
	}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	co, err := redis.ParseClusterURL(proxyURL(strings.TrimSuffix(u.Scheme, "+cluster"), addrs[0], "", q))
	if err != nil {
		return nil, err
	}
	co.Username = u.User.Username()
	co.Password, _ = u.User.Password()
	return co, nil
}

// parseSentinel turns a redis+sentinel URL into FailoverOptions, reading the
// common options through go-redis's own URL parser.
func parseSentinel(u *url.URL, nodes []string) (*redis.FailoverOptions, error) {
	addrs, err := nodeAddrs(nodes, "26379")
	if err != nil {
		return nil, err
	}
	path := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(path) < 1 || path[0] == "" || len(path) > 2 {
		return nil, fmt.Errorf("want /master[/db] after the Sentinel addresses")
	}
	master, db := path[0], ""
	if len(path) == 2 {
		db = "/" + path[1]
	}
	// Borrow go-redis's parsing of db and options.
	o, err := redis.ParseURL(proxyURL("redis", addrs[0], db, u.Query()))
	if err != nil {
		return nil, err
	}
	password, _ := u.User.Password()
	return &redis.FailoverOptions{
		MasterName:      master,
		SentinelAddrs:   addrs,
		Username:        u.User.Username(),
		Password:        password,
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
	}, nil
}

// scrubbed is err's text with password masked.
func scrubbed(err error, password string) string {
	msg := err.Error()
	if password != "" {
		msg = strings.ReplaceAll(msg, password, "xxxxx")
	}
	return msg
}
