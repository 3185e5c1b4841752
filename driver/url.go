package driver

import (
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Errors of Parse. They never quote the URL.
var (
	// ErrNoScheme means the URL does not start with a scheme and ":".
	ErrNoScheme = errors.New("no scheme")
	// ErrNoHost means the URL has no "//" after its scheme, or nothing
	// between "//" (or the user information) and the path.
	ErrNoHost = errors.New("no host")
)

// URL is a backend URL split into its parts.
type URL struct {
	Scheme string // lower-cased

	// User and Password are the user information, percent-decoded.
	// HasUser says the URL has user information (an "@"), HasPassword
	// that it has a ":" in it.
	User, Password       string
	HasUser, HasPassword bool

	// Hosts are the authority after the user information split at
	// commas, as written; at least one (possibly empty) element.
	Hosts []string

	Path     string     // from the "/" after the hosts up to the "?", as written
	Query    url.Values // the parameters after the "?"
	RawQuery string     // what follows the "?", as written
}

// Parse splits raw, of the form
//
//	SCHEME://[USERINFO@]HOST[,HOST...][/PATH][?QUERY]
//
// A URL without "//", or with a third "/" right after it, has no host. It
// checks the form and the percent-encoding of the user information and
// the query, not the hosts (see HostPort). A "#" after the user
// information is refused: it would start a fragment in other URL parsers,
// which then disagree about what follows. Errors never quote raw.
func ParseURL(raw string) (*URL, error) {
	scheme, rest, ok := Scheme(raw)
	if !ok {
		return nil, ErrNoScheme
	}
	rest, ok = strings.CutPrefix(rest, "//")
	if !ok || strings.HasPrefix(rest, "/") {
		// "scheme:///..." has no host, whatever an "@" further on says.
		return nil, ErrNoHost
	}
	u := &URL{Scheme: scheme}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, pass, hasPass := strings.Cut(rest[:at], ":")
		rest = rest[at+1:]
		var err1, err2 error
		u.User, err1 = url.PathUnescape(user)
		u.Password, err2 = url.PathUnescape(pass)
		if err1 != nil || err2 != nil {
			return nil, errors.New("bad percent-encoding in the user information")
		}
		u.HasUser, u.HasPassword = true, hasPass
	}
	if strings.Contains(rest, "#") {
		return nil, errors.New(`"#" after the hosts must be written %23`)
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	if authority == "" {
		return nil, ErrNoHost
	}
	u.Hosts = strings.Split(authority, ",")
	path, query, _ := strings.Cut(tail, "?")
	u.Path = path
	q, err := url.ParseQuery(query)
	if err != nil {
		// Not err: it quotes a piece of the query.
		return nil, errors.New("malformed query parameters")
	}
	u.Query, u.RawQuery = q, query
	return u, nil
}

// Scheme returns the lower-cased scheme of raw and what follows its ":";
// ok is false when raw does not start with a scheme and ":".
func Scheme(raw string) (scheme, rest string, ok bool) {
	i := strings.IndexByte(raw, ':')
	if i <= 0 {
		return "", "", false
	}
	for j, c := range []byte(raw[:i]) {
		letter := 'a' <= c|0x20 && c|0x20 <= 'z'
		if !letter && (j == 0 || !('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", "", false
		}
	}
	return strings.ToLower(raw[:i]), raw[i+1:], true
}

// HostPort checks h ("host", "host:port", "[v6]" or "[v6]:port") and
// returns it as host:port, with defaultPort where none is given. Its
// errors do not quote h: a mistyped URL can put a secret where a host
// should be.
func HostPort(h, defaultPort string) (string, error) {
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
	if strings.HasPrefix(h, "[") {
		if a, err := netip.ParseAddr(host); err != nil || !a.Is6() {
			return "", errors.New("not an IPv6 address in brackets")
		}
	}
	if strings.ContainsFunc(host, func(r rune) bool { return !hostChar(r) }) {
		return "", errForm
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 || port[0] == '+' {
		return "", errors.New("bad port (want 1 to 65535)")
	}
	return net.JoinHostPort(host, port), nil
}

// hostChar reports whether r can be part of a host name or an IP address
// (with an IPv6 zone).
func hostChar(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune(".-_:%", r)
}
