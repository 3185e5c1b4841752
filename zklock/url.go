package zklock

import (
	"context"
	"net/url"
	"strings"

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
// Durations are Go durations (1.5s, 300ms). Unknown parameters, and
// parameters given twice, are refused (see driver.ParseURL). opts apply
// after what the URL says. The connection is made in the background, as
// with New: an unreachable ensemble is not an OpenURL error. ctx is only
// checked.
//
// Errors never contain the password: they show the URL redacted (see
// driver.Redact), which hides the user information and, when the hosts
// are not host names, all but the scheme. A malformed URL returns an
// error matching distlock.ErrInvalidOption.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
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

// urlForm is what this package's URLs look like.
var urlForm = driver.URLForm{
	Pkg:     "zklock",
	Schemes: []string{"zk"},
	Usage: func(string) string {
		return "zk://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/PREFIX][?session_timeout=D&request_timeout=D]"
	},
}

// parseURL reads a zk:// URL without I/O. Its errors match
// distlock.ErrInvalidOption and show the URL redacted.
func parseURL(raw string) (*zkURL, error) {
	p, err := driver.ParseURL(raw, urlForm)
	if err != nil {
		return nil, err
	}
	u := &zkURL{}
	if p.HasUser {
		if !p.HasPassword || p.User == "" {
			return nil, p.Bad("the user information is not USER:PASSWORD@")
		}
		u.opts = append(u.opts, WithDigestAuth(p.User, p.Password))
	}
	if u.servers, err = p.HostPorts(defaultPort); err != nil {
		return nil, err
	}
	if prefix := strings.Trim(p.Path, "/"); prefix != "" {
		dec, err := url.PathUnescape(prefix)
		if err != nil {
			return nil, p.Bad("the prefix is badly percent-encoded")
		}
		u.opts = append(u.opts, WithPrefix("/"+dec))
	}
	if d, ok := p.PositiveDuration("session_timeout"); ok {
		u.opts = append(u.opts, WithSessionTimeout(d))
	}
	if d, ok := p.PositiveDuration("request_timeout"); ok {
		u.opts = append(u.opts, WithRequestTimeout(d))
	}
	if err := p.Done(); err != nil {
		return nil, err
	}
	return u, nil
}
