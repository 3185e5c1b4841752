package etcdlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/distlock/distlock/driver"
)

// DefaultDialTimeout bounds how long OpenURL waits for etcd when the URL
// gives no dial_timeout.
const DefaultDialTimeout = 5 * time.Second

// defaultPort is etcd's client port.
const defaultPort = "2379"

// Schemes returns the URL schemes OpenURL takes.
func Schemes() []string { return []string{"etcd", "etcds"} }

// urlForm is what this package's URLs look like.
var urlForm = driver.URLForm{
	Pkg:        "etcdlock",
	Schemes:    Schemes(),
	TLSSchemes: []string{"etcds"},
	Usage: func(scheme string) string {
		return scheme + "://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/PREFIX][?PARAMS]"
	},
}

// OpenURL opens a Backend on the etcd cluster that rawURL names, with a
// client of its own that the Backend's Close closes. The forms are:
//
//	etcd://HOST[:PORT][,HOST[:PORT]...][/PREFIX][?PARAMS]
//	etcds://...                          the same over TLS
//	etcd://USER:PASSWORD@HOST...         etcd authentication
//
// PORT defaults to 2379; IPv6 hosts are written in brackets. A URL
// without "//", or without a host, is refused. PREFIX is the lock name
// prefix (WithPrefix), percent-decoded, with a "/" added if it does not
// end with one; it defaults to DefaultPrefix. USER and PASSWORD are
// percent-decoded. The user information is everything before the last
// "@" of the URL, so a PASSWORD may hold any character as it is, while
// "@" in PREFIX or PARAMS must be written %40 (and "#" anywhere after the
// user information %23). PARAMS are:
//
//	ca=FILE                  PEM CA bundle to verify the servers (etcds:// only)
//	cert=FILE&key=FILE       client certificate and key, PEM (etcds:// only)
//	dial_timeout=DURATION    how long to wait for etcd (default 5s)
//	request_timeout=DURATION see WithRequestTimeout (default 5s)
//
// Over TLS without ca, the system's roots verify the servers. Durations
// are Go durations (1.5s, 300ms). Unknown parameters, and parameters
// given twice, are refused (see driver.ParseURL). opts are applied after
// the URL's prefix and request timeout, so they win. The connection is
// made lazily, except that with a user name the credentials are checked
// at once, within the dial timeout (and ctx's deadline, if sooner), and
// that over TLS one TLS handshake is made with the servers, so that a
// certificate the client cannot verify, or a server refusing the
// client's certificate (or its absence), is reported by OpenURL rather
// than as requests timing out; without TLS, a cluster whose every
// reachable endpoint expects TLS is reported the same way, naming
// etcds://. An unreachable cluster is not an OpenURL error.
//
// Errors never contain the password: they show the URL redacted (see
// driver.Redact), which hides the user information and, when the hosts
// are not host names, all but the scheme. A malformed URL returns
// an error matching distlock.ErrInvalidOption.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tlsConfig, err := u.TLS(nil)
	if err != nil {
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < u.dialTimeout {
		u.dialTimeout = max(time.Until(d), time.Millisecond)
	}
	if tlsConfig != nil {
		// The etcd client retries a failed TLS handshake silently until
		// a request times out; say at once what is wrong instead.
		if err := checkTLS(ctx, u.hosts, tlsConfig, u.dialTimeout); err != nil {
			return nil, u.Fail(nil, "handshake", err)
		}
	} else {
		// Likewise for plain text sent to a server that expects TLS. The
		// check gives up within a second: an unreachable cluster is the
		// requests' to report.
		pctx, cancel := context.WithTimeout(ctx, min(u.dialTimeout, time.Second))
		err := u.ExpectsTLS(pctx, u.hosts, http2Preface, []string{"h2"})
		cancel()
		if err != nil {
			return nil, err
		}
	}
	cfg := clientv3.Config{
		Endpoints:   u.endpoints,
		DialTimeout: u.dialTimeout,
		Username:    u.user,
		Password:    u.password,
		TLS:         tlsConfig,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{reconnect},
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		if err = u.Scrub(err); permanent(err) {
			return nil, u.Fail(nil, "connect", err)
		}
		return nil, u.Fail(driver.ErrUnavailable, "connect", err)
	}
	b, err := New(cli, append([]Option{WithPrefix(u.prefix), WithRequestTimeout(u.requestTimeout)}, opts...)...)
	if err != nil {
		cli.Close()
		return nil, err
	}
	b.ownsCli = true
	return b, nil
}

// reconnect bounds the pause of OpenURL's client between two tries of a
// server it lost at about a second (1.2 s with jitter; gRPC's default
// grows to two minutes, so that the first request after an outage of
// 30 s waited 13.5 s more), and keeps gRPC's default bound on a try.
var reconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 20 * time.Second,
})

// etcdURL is what an etcd URL says, read without I/O.
type etcdURL struct {
	*driver.URL
	hosts          []string // host:port
	endpoints      []string // the hosts with http:// or https://
	user, password string
	prefix         string
	dialTimeout    time.Duration
	requestTimeout time.Duration
}

// parseURL reads an etcd URL without I/O. Its errors match
// distlock.ErrInvalidOption and show the URL redacted.
func parseURL(raw string) (*etcdURL, error) {
	p, err := driver.ParseURL(raw, urlForm)
	if err != nil {
		return nil, err
	}
	u := &etcdURL{URL: p, dialTimeout: DefaultDialTimeout, requestTimeout: DefaultRequestTimeout, prefix: DefaultPrefix}
	if p.HasUser {
		switch {
		case p.User == "":
			return nil, p.Bad("empty user name")
		case !p.HasPassword || p.Password == "":
			return nil, p.Bad("no password after the user name (write USER:PASSWORD@HOST)")
		}
		u.user, u.password = p.User, p.Password
	}
	if u.hosts, err = p.HostPorts(defaultPort); err != nil {
		return nil, err
	}
	if prefix := strings.TrimPrefix(p.Path, "/"); prefix != "" {
		prefix, err := url.PathUnescape(prefix)
		if err != nil {
			return nil, p.Bad("bad percent-encoding in the prefix")
		}
		if !strings.HasSuffix(prefix, "/") {
			prefix += "/"
		}
		u.prefix = prefix
	}
	if d, ok := p.PositiveDuration("dial_timeout"); ok {
		u.dialTimeout = d
	}
	if d, ok := p.PositiveDuration("request_timeout"); ok {
		u.requestTimeout = d
	}
	if err := p.Done(); err != nil {
		return nil, err
	}
	scheme := "http://"
	if p.Scheme == "etcds" {
		scheme = "https://"
	}
	for _, h := range u.hosts {
		u.endpoints = append(u.endpoints, scheme+h)
	}
	return u, nil
}

// checkTLS makes a TLS connection to every endpoint at once, all within
// timeout, and returns a handshake's error if a server refused it or could
// not be verified (unknown authority, wrong name, client certificate
// missing or refused) and none accepted. It returns nil as soon as one
// endpoint accepts, and also when none can be reached at all: an
// unreachable cluster is reported by the requests, as ErrUnavailable.
func checkTLS(ctx context.Context, hosts []string, cfg *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	results := make(chan error, len(hosts)) // nil: accepted
	for _, h := range hosts {
		go func() { results <- probeTLS(ctx, h, cfg) }()
	}
	var tlsErr error
	for range hosts {
		err := <-results
		if err == nil {
			return nil
		}
		if driver.IsTLSFailure(err) && tlsErr == nil {
			tlsErr = err
		}
	}
	return tlsErr
}

// probeTLS makes one TLS connection to host and closes it; it returns
// nil if the server accepted the handshake.
func probeTLS(ctx context.Context, host string, cfg *tls.Config) error {
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
