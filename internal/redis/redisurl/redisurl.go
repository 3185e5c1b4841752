// Package redisurl is what the backends built on Redis (redislock and
// redlock) add to driver.ParseURL: which of go-redis's URL options a URL
// passes on, checked by the URL reader before go-redis sees them, and
// go-redis's options built from them.
//
// go-redis is given URLs without user information, so that no error of
// its own can quote a secret.
package redisurl

import (
	"maps"
	"net/url"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
)

// Hello is what a plain-text Redis answers (see driver.ExpectsTLS).
const Hello = "PING\r\n"

// go-redis's URL options that a URL passes on, by kind, for every client
// (those that its Sentinel client takes too). The others are refused:
// those of routing reads to replicas (a lock reads what it wrote), the
// disabling of certificate checks (ca= trusts a server's certificate),
// the tuning of pools and pipelines that the Backends do not need, and
// deprecated names.
var (
	durations = []string{"dial_timeout", "read_timeout", "write_timeout", "pool_timeout",
		"min_retry_backoff", "max_retry_backoff", "conn_max_idle_time", "conn_max_lifetime"}
	ints  = []string{"protocol", "max_retries", "pool_size", "min_idle_conns", "max_idle_conns", "max_active_conns"}
	bools = []string{"pool_fifo"}
	texts = []string{"client_name"}

	// clusterInts are the Cluster client's own.
	clusterInts = []string{"max_redirects"}
)

// Query takes go-redis's options (those above, and those of a Cluster
// client if cluster) out of u, each checked by its kind, and returns them
// written as go-redis reads them. The options addr and db are refused:
// the hosts, and the db, have their places in the URL. Call u.Done before
// using the result.
func Query(u *driver.URL, cluster bool) url.Values {
	q := url.Values{}
	for _, name := range durations {
		if d, ok := u.Duration(name); ok {
			q.Set(name, d.String())
		}
	}
	is := ints
	if cluster {
		is = slices.Concat(ints, clusterInts)
	}
	for _, name := range is {
		if n, ok := u.Int(name); ok {
			q.Set(name, strconv.Itoa(n))
		}
	}
	for _, name := range bools {
		if b, ok := u.Bool(name); ok {
			q.Set(name, strconv.FormatBool(b))
		}
	}
	maps.Copy(q, u.PassThrough(texts...))
	u.Refuse("addr", "list the hosts before the path, separated by commas")
	u.Refuse("db", "the db is the path (/DB after the hosts)")
	return q
}

// goRedisURL is the URL go-redis reads its options from: scheme, addr,
// path and q, without user information.
func goRedisURL(scheme, addr, path string, q url.Values) string {
	return (&url.URL{Scheme: scheme, Host: addr, Path: path, RawQuery: q.Encode()}).String()
}

// Options returns go-redis's options for one server at addr, read by
// redis.ParseURL from scheme, addr, path and q (of Query), with u's
// credentials.
func Options(u *driver.URL, q url.Values, scheme, addr, path string) (*redis.Options, error) {
	o, err := redis.ParseURL(goRedisURL(scheme, addr, path, q))
	if err != nil {
		return nil, u.Bad("%v", err)
	}
	o.Username, o.Password = u.User, u.Password
	return o, nil
}

// ClusterOptions returns go-redis's options for a Cluster of which addrs
// are some nodes, read by redis.ParseClusterURL from scheme and q (of
// Query(u, true)), with u's credentials.
func ClusterOptions(u *driver.URL, q url.Values, scheme string, addrs []string) (*redis.ClusterOptions, error) {
	q = maps.Clone(q)
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	o, err := redis.ParseClusterURL(goRedisURL(scheme, addrs[0], "", q))
	if err != nil {
		return nil, u.Bad("%v", err)
	}
	o.Username, o.Password = u.User, u.Password
	return o, nil
}
