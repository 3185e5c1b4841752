package etcdlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/tlsfiles"
)

// DefaultDialTimeout bounds how long OpenURL waits for etcd when the URL
// gives no dial_timeout.
const DefaultDialTimeout = 5 * time.Second

// defaultPort is etcd's client port.
const defaultPort = "2379"

// OpenURL opens a Backend on the etcd cluster that rawURL names, with a
// client of its own that the Backend's Close closes. The forms are:
//
//	etcd://HOST[:PORT][,HOST[:PORT]...][/PREFIX][?PARAMS]
//	etcds://...                          the same over TLS
//	etcd://USER:PASSWORD@HOST...         etcd authentication
//
// PORT defaults to 2379; IPv6 hosts are written in brackets. PREFIX is the
// lock name prefix (WithPrefix), percent-decoded, with a "/" added if it
// does not end with one; it defaults to DefaultPrefix. USER and PASSWORD
// are percent-decoded. The user information is everything before the last
// "@" of the URL, so a PASSWORD may hold any character as it is, while "@"
// in PREFIX or PARAMS must be written %40. PARAMS are:
//
//	ca=FILE               PEM CA bundle to verify the servers (implies TLS)
//	cert=FILE&key=FILE    client certificate and key, PEM (imply TLS)
//	dial_timeout=DURATION how long to wait for etcd (default 5s)
//	request_timeout=DURATION see WithRequestTimeout (default 5s)
//
// Over TLS without ca, the system's roots verify the servers. Unknown
// parameters are refused. The connection is made lazily, except that with
// a user name the credentials are checked at once, within the dial timeout
// (and ctx's deadline, if sooner), and that over TLS one TLS handshake is
// made with the servers, so that a certificate the client cannot verify,
// or a server refusing the client's certificate (or its absence), is
// reported by OpenURL rather than as requests timing out; without TLS, a
// cluster whose every reachable endpoint expects TLS is reported the same
// way, naming etcds://. An unreachable cluster is not an OpenURL error.
//
// Errors never contain the password, nor the URL, the user name or the
// hosts as written (a mistyped URL can put the password in any of them).
// A malformed URL returns an error matching distlock.ErrInvalidOption.
func OpenURL(ctx context.Context, rawURL string) (*Backend, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < u.dialTimeout {
		u.dialTimeout = max(time.Until(d), time.Millisecond)
	}
	if u.tls != nil {
		// The etcd client retries a failed TLS handshake silently until
		// a request times out; say at once what is wrong instead.
		if err := checkTLS(ctx, u.endpoints, u.tls, u.dialTimeout); err != nil {
			return nil, fmt.Errorf("etcdlock: connect to %s: %w", u.hosts, err)
		}
	} else if err := checkPlain(ctx, u.endpoints, min(u.dialTimeout, time.Second)); err != nil {
		// Likewise for plain text sent to a server that expects TLS. The
		// check gives up within a second: an unreachable cluster is the
		// requests' to report.
		return nil, fmt.Errorf("%w: etcdlock: connect to %s: %w", distlock.ErrInvalidOption, u.hosts, err)
	}
	cfg := clientv3.Config{
		Endpoints:   u.endpoints,
		DialTimeout: u.dialTimeout,
		Username:    u.user,
		Password:    u.password,
		TLS:         u.tls,
		Logger:      zap.NewNop(),
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		err = scrub(err, u.password)
		if permanent(err) {
			return nil, fmt.Errorf("etcdlock: connect to %s: %w", u.hosts, err)
		}
		return nil, fmt.Errorf("%w: etcdlock: connect to %s: %w", distlock.ErrUnavailable, u.hosts, err)
	}
	b, err := New(cli, WithPrefix(u.prefix), WithRequestTimeout(u.requestTimeout))
	if err != nil {
		cli.Close()
		return nil, err
	}
	b.ownsCli = true
	return b, nil
}

type etcdURL struct {
	hosts          string // for messages: the host list, without credentials
	endpoints      []string
	user, password string
	prefix         string
	tls            *tls.Config
	dialTimeout    time.Duration
	requestTimeout time.Duration
}

// parseURL parses an etcd URL by hand rather than with net/url, whose
// errors quote the whole URL, password included, and which does not take
// a list of hosts.
func parseURL(raw string) (*etcdURL, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: etcdlock: URL: "+format, append([]any{distlock.ErrInvalidOption}, args...)...)
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, bad("want etcd://HOST[:PORT][,...][/PREFIX] or etcds://...")
	}
	u := &etcdURL{dialTimeout: DefaultDialTimeout, requestTimeout: DefaultRequestTimeout, prefix: DefaultPrefix}
	var useTLS bool
	switch strings.ToLower(scheme) {
	case "etcd":
	case "etcds":
		useTLS = true
	default:
		return nil, bad("scheme must be etcd or etcds")
	}

	// The user information is everything before the last "@" of the URL.
	// A host cannot hold "@", and the prefix and the parameters must write
	// it %40, so that the password may hold any character ("/", "?", "#"
	// and "@" included, which RFC 3986 would have percent-encoded) without
	// any of it being taken for a host, a prefix or a parameter, and shown
	// in an error. Nothing before that "@" is ever shown.
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		info := rest[:at]
		rest = rest[at+1:]
		user, pass, hasPass := strings.Cut(info, ":")
		var err1, err2 error
		u.user, err1 = url.PathUnescape(user)
		u.password, err2 = url.PathUnescape(pass)
		switch {
		case err1 != nil || err2 != nil:
			return nil, bad("bad percent-encoding in the user information")
		case u.user == "":
			return nil, bad("empty user name")
		case !hasPass || u.password == "":
			// The user name is not shown: it may be a password whose
			// colon was encoded, or written without a user name.
			return nil, bad("no password after the user name (write USER:PASSWORD@HOST)")
		}
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	path, query, _ := strings.Cut(tail, "?")

	if authority == "" {
		return nil, bad("no host")
	}
	scheme = "http://"
	if useTLS {
		scheme = "https://"
	}
	var hosts []string
	for i, h := range strings.Split(authority, ",") {
		hp, err := hostPort(h)
		if err != nil {
			// Not quoted: a mistyped URL can put a secret where a host
			// should be.
			return nil, bad("host #%d: %v", i+1, err)
		}
		hosts = append(hosts, hp)
		u.endpoints = append(u.endpoints, scheme+hp)
	}
	u.hosts = strings.Join(hosts, ",")

	if p := strings.TrimPrefix(path, "/"); p != "" {
		p, err := url.PathUnescape(p)
		if err != nil {
			return nil, bad("bad percent-encoding in the prefix")
		}
		if !strings.HasSuffix(p, "/") {
			p += "/"
		}
		u.prefix = p
	}

	params, err := url.ParseQuery(query)
	if err != nil {
		return nil, bad("bad query parameters")
	}
	var ca, cert, key string
	for k, vs := range params {
		v := vs[len(vs)-1]
		switch k {
		case "ca":
			ca = v
		case "cert":
			cert = v
		case "key":
			key = v
		case "dial_timeout", "request_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, bad("%s=%q is not a positive duration", k, v)
			}
			if k == "dial_timeout" {
				u.dialTimeout = d
			} else {
				u.requestTimeout = d
			}
		default:
			return nil, bad("unknown parameter %q (known: ca, cert, key, dial_timeout, request_timeout)", k)
		}
	}
	if ca != "" || cert != "" || key != "" {
		if !useTLS {
			useTLS = true
			for i, e := range u.endpoints {
				u.endpoints[i] = "https://" + strings.TrimPrefix(e, "http://")
			}
		}
	}
	if useTLS {
		if u.tls, err = tlsfiles.Config(nil, ca, cert, key); err != nil {
			return nil, fmt.Errorf("%w: etcdlock: URL: %w", distlock.ErrInvalidOption, err)
		}
	}
	return u, nil
}

// hostPort validates "host[:port]" and adds the default port. Its errors
// do not quote h.
func hostPort(h string) (string, error) {
	if h == "" {
		return "", errors.New("empty")
	}
	errForm := errors.New("write it host:port, with IPv6 addresses in brackets")
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port: "host", or "[v6]".
		port = defaultPort
		switch v6, bracketed := strings.CutPrefix(h, "["); {
		case !bracketed:
			host = h
			if strings.Contains(host, ":") {
				return "", errForm
			}
		case strings.HasSuffix(v6, "]"):
			host = strings.TrimSuffix(v6, "]")
		default:
			return "", errForm
		}
	}
	if host == "" {
		return "", errors.New("empty host name")
	}
	if strings.ContainsFunc(host, notHostChar) {
		return "", errForm
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", errors.New("bad port (want 1 to 65535)")
	}
	return net.JoinHostPort(host, port), nil
}

// notHostChar reports whether r cannot be part of a host name or an IP
// address (with an IPv6 zone).
func notHostChar(r rune) bool {
	return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune(".-_:%", r))
}

// scrub hides secret in err's message, keeping err's chain for errors.Is.
func scrub(err error, secret string) error {
	if secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &scrubbed{err: err, msg: strings.ReplaceAll(err.Error(), secret, "xxxxx")}
}

type scrubbed struct {
	err error
	msg string
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// checkTLS makes a TLS connection to every endpoint at once, all within
// timeout, and returns a handshake's error if a server refused it or could
// not be verified (unknown authority, wrong name, client certificate
// missing or refused) and none accepted. It returns nil as soon as one
// endpoint accepts, and also when none can be reached at all: an
// unreachable cluster is reported by the requests, as ErrUnavailable.
func checkTLS(ctx context.Context, endpoints []string, cfg *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results := make(chan error, len(endpoints)) // nil: accepted
	for _, ep := range endpoints {
		go func() { results <- probeTLS(ctx, ep, cfg) }()
	}
	var tlsErr error
	for range endpoints {
		err := <-results
		if err == nil {
			return nil
		}
		if tlsfiles.IsFailure(err) && tlsErr == nil {
			tlsErr = err
		}
	}
	return tlsErr
}

// probeTLS makes one TLS connection to endpoint and closes it; it returns
// nil if the server accepted the handshake.
func probeTLS(ctx context.Context, endpoint string, cfg *tls.Config) error {
	host := endpoint
	if i := strings.Index(host, "://"); i >= 0 {
		host = host[i+3:]
	}
	c := cfg.Clone()
	c.NextProtos = []string{"h2"}
	conn, err := (&tls.Dialer{Config: c}).DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("TLS with %s: %w", host, err)
	}
	defer conn.Close()
	// With TLS 1.3 a server that refuses the client's certificate says so
	// after the handshake: read briefly for its alert. A healthy etcd
	// sends its HTTP/2 settings at once.
	tc := conn.(*tls.Conn)
	_ = tc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err = tc.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		return nil
	}
	return fmt.Errorf("TLS with %s: %w", host, err)
}

// http2Preface starts every HTTP/2 (gRPC) connection; a plain-text etcd
// answers it with its settings, a TLS one closes the connection.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// checkPlain returns an error naming etcds:// when every endpoint that
// answers speaks TLS: it sends the HTTP/2 preface to each endpoint at once,
// and where the server closes the connection without a word, offers a TLS
// handshake (without verifying anything: it only asks whether the server
// speaks TLS). It returns nil as soon as an endpoint answers in plain text,
// and when none can be reached (the requests report that).
func checkPlain(ctx context.Context, endpoints []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type verdict struct {
		host  string
		isTLS bool
	}
	results := make(chan verdict, len(endpoints))
	for _, ep := range endpoints {
		go func() {
			host := ep
			if i := strings.Index(host, "://"); i >= 0 {
				host = host[i+3:]
			}
			results <- verdict{host, speaksTLS(ctx, host)}
		}()
	}
	var tlsHost string
	for range endpoints {
		v := <-results
		if !v.isTLS {
			return nil
		}
		tlsHost = v.host
	}
	return fmt.Errorf("the server at %s expects TLS: use etcds:// (with ca, cert and key as it needs)", tlsHost)
}

// speaksTLS reports whether the server at host closes a plain HTTP/2
// connection at once and accepts a TLS handshake. An unreachable host, or
// one that answers in plain text, does not.
func speaksTLS(ctx context.Context, host string) bool {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return false
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	_, err = io.WriteString(conn, http2Preface)
	if err == nil {
		_, err = conn.Read(make([]byte, 1))
	}
	conn.Close()
	if !tlsfiles.ClosedAtOnce(err) {
		return false // it answered in plain text, or said nothing in time
	}
	return tlsfiles.SpeaksTLS(ctx, host, []string{"h2"})
}
