package zklock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/distlock/distlock"
)

// defaultPort is ZooKeeper's client port.
const defaultPort = "2181"

// OpenURL opens a Backend on the ensemble that rawURL names:
//
//	zk://HOST[:PORT][,HOST[:PORT]...][/PREFIX][?PARAMS]
//	zk://USER:PASSWORD@HOST...           digest authentication (WithDigestAuth)
//
// PORT defaults to 2181; IPv6 hosts are written in brackets. PREFIX is the
// ZooKeeper path of the locks (WithPrefix), percent-decoded, without a
// trailing "/"; it defaults to DefaultPrefix. USER and PASSWORD are
// percent-decoded. The user information is everything before the last "@"
// of the URL, so a PASSWORD may hold any character as it is, while "@" in
// PREFIX or PARAMS must be written %40. PARAMS are:
//
//	session_timeout=DURATION see WithSessionTimeout (default 10s)
//	request_timeout=DURATION see WithRequestTimeout (default 5s)
//
// Unknown parameters are refused. opts apply after what the URL says. The
// connection is made in the background, as with New: an unreachable
// ensemble is not an OpenURL error. ctx is only checked.
//
// Errors never contain the password, nor the URL, the user name or the
// hosts as written (a mistyped URL can put the password in any of them).
// A malformed URL returns an error matching distlock.ErrInvalidOption.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: zklock: URL: %w", distlock.ErrInvalidOption, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return New(u.servers, append(u.opts, opts...)...)
}

type zkURL struct {
	servers []string
	opts    []Option
}

// parseURL parses a zk:// URL by hand rather than with net/url, whose
// errors quote the whole URL, password included, and which takes neither
// a list of hosts nor a password holding "/" or "@". Its errors name what
// is wrong without quoting the input.
func parseURL(raw string) (*zkURL, error) {
	rest, ok := strings.CutPrefix(raw, "zk://")
	if !ok {
		return nil, errors.New("the scheme is not zk://")
	}
	u := &zkURL{}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		user, password, ok := strings.Cut(rest[:i], ":")
		if !ok {
			return nil, errors.New("the user information has no password (USER:PASSWORD@)")
		}
		var err1, err2 error
		user, err1 = url.PathUnescape(user)
		password, err2 = url.PathUnescape(password)
		if err1 != nil || err2 != nil || user == "" {
			return nil, errors.New("the user name or password is empty or badly percent-encoded")
		}
		u.opts = append(u.opts, WithDigestAuth(user, password))
		rest = rest[i+1:]
	}
	hosts, query, _ := strings.Cut(rest, "?")
	hosts, prefix, hasPath := strings.Cut(hosts, "/")
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			return nil, errors.New("empty host")
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// No port, or a bracketed IPv6 address without one.
			host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), defaultPort
			if strings.ContainsAny(host, "[]") || (strings.Contains(host, ":") && !strings.HasPrefix(h, "[")) {
				return nil, errors.New("a host is malformed (IPv6 addresses go in brackets)")
			}
		}
		if host == "" || port == "" || strings.ContainsAny(host, " /") {
			return nil, errors.New("a host is malformed")
		}
		u.servers = append(u.servers, net.JoinHostPort(host, port))
	}
	if hasPath && strings.Trim(prefix, "/") != "" {
		p, err := url.PathUnescape(prefix)
		if err != nil {
			return nil, errors.New("the prefix is badly percent-encoded")
		}
		u.opts = append(u.opts, WithPrefix("/"+strings.TrimSuffix(p, "/")))
	}
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil {
			return nil, errors.New("the parameters are malformed")
		}
		for k, vs := range q {
			if len(vs) != 1 {
				return nil, fmt.Errorf("parameter %s given %d times", safeName(k), len(vs))
			}
			d, err := time.ParseDuration(vs[0])
			if err != nil && (k == "session_timeout" || k == "request_timeout") {
				return nil, fmt.Errorf("parameter %s is not a duration", k)
			}
			switch k {
			case "session_timeout":
				u.opts = append(u.opts, WithSessionTimeout(d))
			case "request_timeout":
				u.opts = append(u.opts, WithRequestTimeout(d))
			default:
				return nil, fmt.Errorf("unknown parameter %s", safeName(k))
			}
		}
	}
	return u, nil
}

// safeName returns a parameter name for a message, or a placeholder if it
// could be something else typed in the wrong place.
func safeName(k string) string {
	for _, r := range k {
		if (r < 'a' || r > 'z') && r != '_' {
			return "(not shown)"
		}
	}
	if len(k) > 32 {
		return "(not shown)"
	}
	return k
}
