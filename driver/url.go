package driver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Errors of ParseURL's reading of a URL's form, which its error wraps.
var (
	// ErrNoScheme means the URL does not start with a scheme and ":".
	ErrNoScheme = errors.New("no scheme")
	// ErrNoHost means the URL has no "//" after its scheme, or nothing
	// between "//" (or the user information) and the path.
	ErrNoHost = errors.New("no host")
)

// URLForm is what the URLs of one backend package look like: what
// ParseURL checks before the package reads the parts that are its own.
type URLForm struct {
	// Pkg names the package; every error begins with it ("etcdlock").
	Pkg string
	// Schemes are the schemes the package takes, in lower case. The
	// first stands for them all in messages about another scheme.
	Schemes []string
	// TLSSchemes are those of Schemes that speak TLS. When there are
	// some, ParseURL takes the parameters ca (a PEM CA bundle that
	// verifies the servers instead of the system's roots), cert and key
	// (a PEM client certificate and its key, together), and refuses them
	// with the other schemes; URL.TLS reads the files. When there are
	// none, ca, cert and key are parameters like any other.
	TLSSchemes []string
	// Usage returns the form of a URL of scheme (one of Schemes) for
	// messages, such as "etcd://[USER:PASSWORD@]HOST[:PORT][,...][/PREFIX][?PARAMS]".
	Usage func(scheme string) string
	// Local says that the URLs name something on this host (file:): they
	// take no user information, and may have no "//" (file:rel/dir, whose
	// Path is what follows the ":"; Hosts is then empty) or nothing
	// between "//" and the path (file:///dir: one empty host).
	Local bool
}

// URL is a backend URL read by ParseURL: its parts, what of it may be
// shown, and its query parameters, which the backend takes one by one by
// name (Get, Bool, Duration, PassThrough, ...) before Done refuses the
// rest. Its methods are not safe for concurrent use.
type URL struct {
	Scheme string // lower-cased

	// User and Password are the user information, percent-decoded.
	// HasUser says the URL has user information (an "@"), HasPassword
	// that it has a ":" in it.
	User, Password       string
	HasUser, HasPassword bool

	// Hosts are the authority after the user information split at
	// commas, as written; at least one (possibly empty) element, but for
	// a Local form without "//".
	Hosts []string

	Path string // from the "/" after the hosts up to the "?", as written

	// Shown is the URL redacted (see Redact): the only form of it that
	// any message shows.
	Shown string

	raw      string
	form     URLForm
	params   []param           // the query's, in order
	asked    map[string]bool   // the names a getter asked for
	problems map[string]string // a name's first problem
	tlsFiles [3]string         // ca, cert, key
}

// param is one query parameter, percent-decoded.
type param struct{ name, value string }

// ParseURL reads raw, a URL of the form f, of the form
//
//	SCHEME://[USERINFO@]HOST[,HOST...][/PATH][?QUERY]
//
// The user information is everything between "//" and the last "@", so
// that a password may hold any character as it is ("@" elsewhere is
// written %40); it is percent-decoded. A "#" after it is refused: it would
// start a fragment in other URL parsers, which then disagree about what
// follows. A URL without "//", or with nothing between "//" (or the user
// information) and the path, has no host and is refused (but see
// URLForm.Local), and so is one that holds a control character as it is.
// The hosts are split at commas and not checked (see HostPorts). The query is pairs NAME=VALUE separated by "&", each
// percent-decoded, with "+" a plus (as libpq reads it: a space is %20); a
// ";" must be written %3B, and a NUL (%00) is refused. Then it checks the
// scheme against f.Schemes and reads ca, cert and key (see
// URLForm.TLSSchemes).
//
// Its errors match ErrInvalidOption, and ErrNoScheme or ErrNoHost when
// they say so; they show the URL as Redact does and say what is wrong,
// quoting nothing else of raw.
func ParseURL(raw string, f URLForm) (*URL, error) {
	u := &URL{Shown: Redact(raw), raw: raw, form: f, asked: map[string]bool{}, problems: map[string]string{}}
	scheme, rest, ok := Scheme(raw)
	if !ok {
		return nil, u.Bad("%w; want %s", ErrNoScheme, f.usage(""))
	}
	if !slices.Contains(f.Schemes, scheme) {
		return nil, u.Bad("the scheme must be %s; want %s", orList(f.Schemes, ""), f.usage(""))
	}
	u.Scheme = scheme
	if err := u.split(rest); err != nil {
		return nil, u.Bad("%w; want %s", err, f.usage(scheme))
	}
	if len(f.TLSSchemes) > 0 {
		u.readTLSFiles()
	}
	return u, nil
}

// split reads what follows the scheme's ":".
func (u *URL) split(rest string) error {
	if strings.ContainsFunc(rest, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return errors.New("a control character must be percent-encoded")
	}
	local := u.form.Local
	if local && strings.Contains(rest, "@") {
		return errors.New(`this URL takes no user information (write "@" as %40)`)
	}
	rest, slashes := strings.CutPrefix(rest, "//")
	if !local && (!slashes || strings.HasPrefix(rest, "/")) {
		// "scheme:///..." has no host, whatever an "@" further on says.
		return ErrNoHost
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, pass, hasPass := strings.Cut(rest[:at], ":")
		rest = rest[at+1:]
		var err1, err2 error
		u.User, err1 = url.PathUnescape(user)
		u.Password, err2 = url.PathUnescape(pass)
		if err1 != nil || err2 != nil {
			return errors.New("bad percent-encoding in the user information")
		}
		u.HasUser, u.HasPassword = true, hasPass
	}
	if strings.Contains(rest, "#") {
		return errors.New(`"#" after the hosts must be written %23`)
	}
	head, query, _ := strings.Cut(rest, "?")
	if slashes {
		authority, path := head, ""
		if i := strings.IndexByte(head, '/'); i >= 0 {
			authority, path = head[:i], head[i:]
		}
		if authority == "" && !local {
			return ErrNoHost
		}
		u.Hosts, head = strings.Split(authority, ","), path
	}
	u.Path = head
	return u.readQuery(query)
}

// readQuery reads the parameters of query.
func (u *URL) readQuery(query string) error {
	if strings.Contains(query, ";") {
		return errors.New(`";" in the query must be written %3B`)
	}
	for _, pair := range strings.Split(query, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		name, err1 := url.PathUnescape(k)
		value, err2 := url.PathUnescape(v)
		switch {
		case err1 != nil || err2 != nil:
			// Not err: it quotes a piece of the query.
			return errors.New("malformed query parameters")
		case strings.ContainsRune(name+value, 0):
			return errors.New("a query parameter holds a NUL (%00)")
		}
		u.params = append(u.params, param{name, value})
	}
	return nil
}

// usage is the form of a URL of scheme, or of the first scheme.
func (f URLForm) usage(scheme string) string {
	if !slices.Contains(f.Schemes, scheme) && len(f.Schemes) > 0 {
		scheme = f.Schemes[0]
	}
	if f.Usage == nil {
		return scheme + "://HOST[:PORT][,HOST[:PORT]...][/PATH][?PARAMS]"
	}
	return f.Usage(scheme)
}

// orList writes schemes as "a, b or c", each followed by suffix.
func orList(schemes []string, suffix string) string {
	s := make([]string, len(schemes))
	for i, k := range schemes {
		s[i] = k + suffix
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
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

// HostPorts returns every host of the URL as HostPort does, with
// defaultPort where one has none. Its error names the first bad host by
// its place ("host #2"), never by what it says.
func (u *URL) HostPorts(defaultPort string) ([]string, error) {
	out := make([]string, 0, len(u.Hosts))
	for i, h := range u.Hosts {
		hp, err := HostPort(h, defaultPort)
		if err != nil {
			return nil, u.Bad("host #%d: %v", i+1, err)
		}
		out = append(out, hp)
	}
	return out, nil
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

// readTLSFiles takes ca, cert and key, and notes where they cannot apply.
func (u *URL) readTLSFiles() {
	tlsScheme := slices.Contains(u.form.TLSSchemes, u.Scheme)
	for i, name := range []string{"ca", "cert", "key"} {
		v, _ := u.Get(name)
		u.tlsFiles[i] = v
		if v != "" && !tlsScheme {
			u.Problem(name, "needs %s", orList(u.form.TLSSchemes, "://"))
		}
	}
	if cert, key := u.tlsFiles[1], u.tlsFiles[2]; (cert == "") != (key == "") {
		if cert == "" {
			u.Problem("key", "needs cert")
		} else {
			u.Problem("cert", "needs key")
		}
	}
}

// TLS returns nil for a URL whose scheme is not one of its form's
// TLSSchemes. For one that is, it returns base (a new configuration when
// nil) completed with the files of the parameters ca, cert and key, which
// it reads (see TLSConfig): call it when opening, after Done. Its error
// matches ErrInvalidOption and names the file and what is wrong with it.
func (u *URL) TLS(base *tls.Config) (*tls.Config, error) {
	if !slices.Contains(u.form.TLSSchemes, u.Scheme) {
		return nil, nil
	}
	cfg, err := TLSConfig(base, u.tlsFiles[0], u.tlsFiles[1], u.tlsFiles[2])
	if err != nil {
		return nil, u.Fail(ErrInvalidOption, "TLS files", err)
	}
	return cfg, nil
}

// Bad returns the error of a malformed URL: it matches ErrInvalidOption
// (and what format wraps with %w) and says the package, the URL as Shown
// and what is wrong. format and args must not quote the URL: use the
// parts' places ("host #2") and names, never their values.
func (u *URL) Bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s: malformed backend URL %q: %w", ErrInvalidOption, u.form.Pkg, u.Shown, fmt.Errorf(format, args...))
}

// Fail describes a failure to open the URL: the package, the URL as
// Shown, what failed, and err (if not nil) scrubbed of the URL's secrets.
// The error matches sentinel, unless it is nil: for a failure that is
// neither the caller's mistake nor worth retrying.
func (u *URL) Fail(sentinel error, what string, err error) error {
	msg := u.form.Pkg + ": " + u.Shown + ": " + what
	switch {
	case sentinel == nil:
		return fmt.Errorf("%s: %w", msg, u.Scrub(err))
	case err != nil:
		return fmt.Errorf("%w: %s: %w", sentinel, msg, u.Scrub(err))
	}
	return fmt.Errorf("%w: %s", sentinel, msg)
}

// String returns the URL as Shown, so that printing a URL shows no
// secret.
func (u *URL) String() string { return u.Shown }

// GoString returns the URL as Shown, as String does, for %#v.
func (u *URL) GoString() string { return u.Shown }

// Scrub returns err with the URL's secrets masked (see Scrub).
func (u *URL) Scrub(err error) error { return Scrub(err, u.raw) }
