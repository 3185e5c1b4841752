package gatewaylock

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/distlock/distlock/driver"
)

// DefaultPort is the port of `distlock serve` when a URL gives none.
const DefaultPort = "7420"

// Schemes returns the URL schemes OpenURL takes.
func Schemes() []string { return []string{"distlock+http", "distlock+https"} }

// OpenURL opens a Backend on the gateway that rawURL names:
//
//	distlock+http://HOST[:PORT][/PATH]
//	distlock+https://HOST[:PORT][/PATH]   the same over TLS
//	distlock+http://:TOKEN@HOST...       with a bearer token
//
// PORT defaults to 7420; PATH is where the gateway is served, if not at
// the root. TOKEN is percent-decoded, and may also be given as ?token=.
// Over TLS, ca=FILE is a PEM CA bundle to verify the gateway with (default:
// the system's roots), and cert=FILE&key=FILE a client certificate and key
// (PEM) for a gateway that asks for one.
// Options apply after those of the URL. Errors never quote the token.
func OpenURL(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	bad := func(why string) error {
		return fmt.Errorf("%w: gatewaylock: backend URL %s: %s", driver.ErrInvalidOption, driver.Redact(rawURL), why)
	}
	u, err := driver.ParseURL(rawURL)
	if err != nil {
		scheme, _, _ := driver.Scheme(rawURL)
		if !slices.Contains(Schemes(), scheme) {
			scheme = "distlock+http"
		}
		return nil, bad(err.Error() + "; want " + scheme + "://[:TOKEN@]HOST[:PORT][/PATH]")
	}
	if !slices.Contains(Schemes(), u.Scheme) {
		return nil, bad("the scheme must be distlock+http or distlock+https")
	}
	if len(u.Hosts) != 1 {
		return nil, bad("one gateway host, please")
	}
	hp, err := driver.HostPort(u.Hosts[0], DefaultPort)
	if err != nil {
		return nil, bad("host: " + err.Error())
	}
	token := u.Password
	if u.User != "" {
		return nil, bad("the bearer token goes after a \":\" (distlock+http://:TOKEN@HOST), with no user name")
	}
	files := map[string]string{}
	for k, v := range u.Query {
		switch {
		case k == "token" && len(v) == 1 && token == "":
			token = v[0]
		case k == "token":
			return nil, bad("one token, please")
		case (k == "ca" || k == "cert" || k == "key") && len(v) == 1:
			if u.Scheme != "distlock+https" {
				return nil, bad(k + "= needs distlock+https")
			}
			files[k] = v[0]
		default:
			return nil, bad(fmt.Sprintf("unknown parameter %q", k))
		}
	}
	if len(files) > 0 {
		cfg, err := driver.TLSConfig(nil, files["ca"], files["cert"], files["key"])
		if err != nil {
			return nil, bad(err.Error())
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		t.TLSClientConfig = cfg
		opts = append([]Option{withTransport(t)}, opts...)
	}
	path, err := url.PathUnescape(u.Path)
	if err != nil {
		return nil, bad("bad percent-encoding in the path")
	}
	base := strings.TrimPrefix(u.Scheme, "distlock+") + "://" + hp + (&url.URL{Path: path}).EscapedPath()
	if token != "" {
		opts = append([]Option{WithToken(token)}, opts...)
	}
	return New(base, opts...)
}
