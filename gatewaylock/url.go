package gatewaylock

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/distlock/distlock/driver"
)

// DefaultPort is the port of `distlock serve` when a URL gives none.
const DefaultPort = "7420"

// Schemes returns the URL schemes OpenURL takes.
func Schemes() []string { return []string{"distlock+http", "distlock+https"} }

// urlForm is what this package's URLs look like.
var urlForm = driver.URLForm{
	Pkg:        "gatewaylock",
	Schemes:    Schemes(),
	TLSSchemes: []string{"distlock+https"},
	Usage:      func(scheme string) string { return scheme + "://[:TOKEN@]HOST[:PORT][/PATH][?PARAMS]" },
}

// OpenURL opens a Backend on the gateway that rawURL names:
//
//	distlock+http://HOST[:PORT][/PATH]
//	distlock+https://HOST[:PORT][/PATH]   the same over TLS
//	distlock+http://:TOKEN@HOST...       with a bearer token
//
// PORT defaults to 7420; PATH is where the gateway is served, if not at
// the root. TOKEN is percent-decoded, and may instead be given as
// ?token=TOKEN. Over TLS (distlock+https:// only), ca=FILE is a PEM CA
// bundle to verify the gateway with (default: the system's roots), and
// cert=FILE&key=FILE a client certificate and key (PEM) for a gateway that
// asks for one. Unknown parameters, and parameters given twice, are
// refused (see driver.ParseURL).
// Options apply after those of the URL. Errors never quote the token.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	u, err := driver.ParseURL(rawURL, urlForm)
	if err != nil {
		return nil, err
	}
	if len(u.Hosts) != 1 {
		return nil, u.Bad("one gateway host, please")
	}
	hosts, err := u.HostPorts(DefaultPort)
	if err != nil {
		return nil, err
	}
	if u.User != "" {
		return nil, u.Bad("the bearer token goes after a \":\" (distlock+http://:TOKEN@HOST), with no user name")
	}
	token := u.Password
	if t, ok := u.Secret("token"); ok {
		if token != "" {
			u.Problem("token", "the URL has a token before the host too")
		}
		token = t
	}
	if err := u.Done(); err != nil {
		return nil, err
	}
	path, err := url.PathUnescape(u.Path)
	if err != nil {
		return nil, u.Bad("bad percent-encoding in the path")
	}
	cfg, err := u.TLS(nil)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		t.TLSClientConfig = cfg
		opts = append([]Option{withTransport(t)}, opts...)
	}
	base := strings.TrimPrefix(u.Scheme, "distlock+") + "://" + hosts[0] + (&url.URL{Path: path}).EscapedPath()
	if token != "" {
		opts = append([]Option{WithToken(token)}, opts...)
	}
	return New(base, opts...)
}
