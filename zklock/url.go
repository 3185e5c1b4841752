package zklock

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
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
		return nil, fmt.Errorf("%w: zklock: malformed backend URL %q: %w", driver.ErrInvalidOption, driver.Redact(rawURL), err)
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

// urlForm is the form of a zk:// URL, for error messages.
const urlForm = "want zk://[user:password@]host[:port][,host[:port]...][/prefix][?session_timeout=D&request_timeout=D]"

// parseURL reads a zk:// URL through driver.ParseURL, the one reading of backend
// URLs (user information up to the last "@"). Its errors never quote the
// input: a mistyped URL can put the password anywhere.
func parseURL(raw string) (*zkURL, error) {
	p, err := driver.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("%v; %s", err, urlForm)
	}
	if p.Scheme != "zk" {
		return nil, fmt.Errorf("the scheme is not zk; %s", urlForm)
	}
	u := &zkURL{}
	if p.HasUser {
		if !p.HasPassword || p.User == "" {
			return nil, errors.New("the user information is not USER:PASSWORD@")
		}
		u.opts = append(u.opts, WithDigestAuth(p.User, p.Password))
	}
	for i, h := range p.Hosts {
		hp, err := driver.HostPort(h, defaultPort)
		if err != nil {
			return nil, fmt.Errorf("host #%d: %v", i+1, err)
		}
		u.servers = append(u.servers, hp)
	}
	if prefix := strings.Trim(p.Path, "/"); prefix != "" {
		dec, err := url.PathUnescape(prefix)
		if err != nil {
			return nil, errors.New("the prefix is badly percent-encoded")
		}
		u.opts = append(u.opts, WithPrefix("/"+dec))
	}
	// In order, so that the same URL always gets the same error.
	for _, k := range slices.Sorted(maps.Keys(p.Query)) {
		vs := p.Query[k]
		if len(vs) != 1 {
			return nil, fmt.Errorf("parameter %s given %d times", safeName(k), len(vs))
		}
		switch k {
		case "session_timeout", "request_timeout":
			d, err := time.ParseDuration(vs[0])
			if err != nil {
				return nil, fmt.Errorf("parameter %s is not a duration", k)
			}
			if k == "session_timeout" {
				u.opts = append(u.opts, WithSessionTimeout(d))
			} else {
				u.opts = append(u.opts, WithRequestTimeout(d))
			}
		default:
			return nil, fmt.Errorf("unknown parameter %s", safeName(k))
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
