package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/redislock"
	"github.com/redis/go-redis/v9"
)

// An Opener opens the lock service named by a backend URL. The Closer
// releases what the backend holds (connections); it is called once, after
// the backend's last use.
type Opener func(ctx context.Context, rawURL string) (distlock.Backend, io.Closer, error)

// registry maps URL schemes to openers.
var registry = map[string]Opener{
	"file":           openFile,
	"redis":          AsOpener(redislock.OpenURL),
	"rediss":         AsOpener(redislock.OpenURL),
	"redis+sentinel": AsOpener(redislock.OpenURL),
	"redis+cluster":  AsOpener(redislock.OpenURL),
	"rediss+cluster": AsOpener(redislock.OpenURL),
	"etcd":           AsOpener(etcdlock.OpenURL),
	"etcds":          AsOpener(etcdlock.OpenURL),
	// Wire more backends here, one line per scheme, as their packages land.
}

// reserved are the schemes of backends that exist in the design but are not
// wired into this build yet.
var reserved = []string{
	"redlock", "zk", "postgres", "postgresql",
}

// AsOpener adapts a backend package's OpenURL function, whose backend has a
// Close method, to an Opener.
func AsOpener[B interface {
	distlock.Backend
	Close() error
}](open func(ctx context.Context, rawURL string) (B, error)) Opener {
	return func(ctx context.Context, rawURL string) (distlock.Backend, io.Closer, error) {
		b, err := open(ctx, rawURL)
		if err != nil {
			return nil, nil, err
		}
		return b, b, nil
	}
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// openBackend opens the backend named by rawURL ("" for the default, a
// file:// backend in filelock's default directory) with the openers of
// this run. Errors never contain the URL's password.
func openBackend(ctx context.Context, rawURL string, openers map[string]Opener) (distlock.Backend, io.Closer, error) {
	if rawURL == "" {
		rawURL = "file://"
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, usagef("malformed backend URL %s: %s", redact(rawURL), parseReason(rawURL, err))
	}
	shown := redact(rawURL)
	scheme := strings.ToLower(u.Scheme)
	open := openers[scheme]
	switch {
	case scheme == "" && strings.HasPrefix(rawURL, "/"):
		return nil, nil, usagef("backend URL %s has no scheme; for a lock directory use file://%s", shown, shown)
	case scheme == "":
		return nil, nil, usagef("backend URL %s has no scheme; want one of %s", shown, schemes(openers))
	case open == nil && slices.Contains(reserved, scheme):
		return nil, nil, usagef("backend %s: the %s:// backend is not available yet in this build; available: %s",
			shown, scheme, schemes(openers))
	case open == nil:
		return nil, nil, usagef("backend %s: unknown scheme %q; want one of %s", shown, scheme, schemes(openers))
	}
	b, closer, err := open(ctx, rawURL)
	if err != nil {
		return nil, nil, &scrubbed{fmt.Errorf("open backend %s: %w", shown, err), secrets(rawURL, u)}
	}
	if closer == nil {
		closer = nopCloser{}
	}
	return b, closer, nil
}

// describeBackend names the backend b, opened from rawURL, for messages:
// the resolved directory of a file:// backend, the redacted URL otherwise.
func describeBackend(b distlock.Backend, rawURL string) string {
	if d, ok := describeFile(b); ok {
		return d
	}
	if rawURL == "" {
		rawURL = "file://"
	}
	return redact(rawURL)
}

func schemes(openers map[string]Opener) string {
	var s []string
	for k := range openers {
		s = append(s, k+"://")
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// sensitiveParams are query parameters whose values are never shown.
var sensitiveParams = []string{"password", "pass", "passwd", "pwd", "secret", "token", "sslpassword", "auth"}

func isSensitive(param string) bool {
	return slices.Contains(sensitiveParams, strings.ToLower(param))
}

// redact returns rawURL fit for messages and logs: the password of its user
// and the values of password-like query parameters are replaced by
// "xxxxx". A URL that cannot be parsed keeps only its scheme.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		scheme, _, ok := strings.Cut(rawURL, "://")
		if !ok || strings.ContainsAny(scheme, "@:/?#") {
			return "(unparsable URL)"
		}
		return scheme + "://(unparsable)"
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			if isSensitive(k) {
				q[k] = []string{"xxxxx"}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// parseReason explains a parse failure without repeating the URL, which
// may hold a password: url.Parse's own error quotes it, and parts of it
// (a port, a host) can be pieces of a password when the URL is malformed.
func parseReason(rawURL string, err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if strings.Contains(rawURL, "@") || strings.Contains(strings.ToLower(rawURL), "pass") {
		return "it cannot be parsed (details withheld: the URL may hold a password)"
	}
	return err.Error()
}

// secrets returns the strings of rawURL (parsed as u) that must not appear
// in messages: the password and password-like query values, both as
// written and decoded.
func secrets(rawURL string, u *url.URL) []string {
	var s []string
	add := func(v string) {
		if v != "" {
			s = append(s, v, url.QueryEscape(v), url.PathEscape(v))
		}
	}
	if p, ok := u.User.Password(); ok {
		add(p)
		// As a URL rebuilt from it writes it (url.URL.String).
		if _, escaped, ok := strings.Cut(url.UserPassword("", p).String(), ":"); ok && escaped != p {
			s = append(s, escaped)
		}
		if _, rest, ok := strings.Cut(rawURL, "://"); ok {
			authority, _, _ := strings.Cut(rest, "/")
			if i := strings.LastIndex(authority, "@"); i >= 0 {
				if _, rawPass, ok := strings.Cut(authority[:i], ":"); ok {
					add(rawPass)
				}
			}
		}
	}
	for _, kv := range strings.Split(u.RawQuery, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if uk, err := url.QueryUnescape(k); err == nil && isSensitive(uk) {
			add(v)
			if uv, err := url.QueryUnescape(v); err == nil {
				add(uv)
			}
		}
	}
	return s
}

// scrubbed is an error whose message has the given secrets masked, for
// errors of backends that might quote the URL they were given.
type scrubbed struct {
	err     error
	secrets []string
}

func (e *scrubbed) Error() string {
	msg := e.err.Error()
	for _, s := range e.secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return msg
}

func (e *scrubbed) Unwrap() error { return e.err }

// go-redis logs its own dial retries to stderr; distlock reports the
// outcome itself, once.
func init() { redis.SetLogger(quietRedis{}) }

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
