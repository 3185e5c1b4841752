package driver

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Mask replaces what is never shown: the user information of a URL, the
// values of secret query parameters, and secrets in error messages.
const Mask = "xxxxx"

// hidden stands for a part of a URL that cannot be shown safely.
const hidden = "(redacted)"

// Redact returns raw fit for messages and logs. The user information
// becomes Mask, and so do the values of secret query parameters (see
// IsSecretParam); a fragment is left out. When in doubt it shows the
// scheme only ("redis://(redacted)"): when the hosts are not host names
// or addresses (a mistyped URL can put a password there), when the user
// information holds "?" or "#" (a query or fragment with an "@" cannot be
// told from a password), when a form without "//" holds "@" or ":", and
// when raw holds control characters. Without a scheme it shows raw only if
// it holds none of "@", ":", "?" and "#".
func Redact(raw string) string {
	if !utf8.ValidString(raw) || strings.ContainsFunc(raw, func(r rune) bool { return !unicode.IsPrint(r) }) {
		if scheme, _, ok := Scheme(raw); ok {
			return scheme + ":" + hidden
		}
		return hidden
	}
	scheme, rest, ok := Scheme(raw)
	if !ok {
		if strings.ContainsAny(raw, "@:?#") {
			return hidden
		}
		return raw
	}
	scheme = raw[:len(scheme)] // as written
	rest, ok = strings.CutPrefix(rest, "//")
	if !ok {
		if strings.ContainsAny(rest, "@:?#") {
			return scheme + ":" + hidden
		}
		return scheme + ":" + rest
	}
	whole := scheme + "://" + hidden
	var b strings.Builder
	b.WriteString(scheme + "://")
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if strings.ContainsAny(rest[:at], "?#") {
			return whole
		}
		b.WriteString(Mask + "@")
		rest = rest[at+1:]
	}
	rest, _, _ = strings.Cut(rest, "#")
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	for _, h := range strings.Split(authority, ",") {
		if !showableHost(h) {
			return whole
		}
	}
	b.WriteString(authority)
	path, query, hasQuery := strings.Cut(tail, "?")
	b.WriteString(path)
	if !hasQuery {
		return b.String()
	}
	b.WriteByte('?')
	b.WriteString(redactQuery(query))
	return b.String()
}

// redactQuery masks the values of the secret parameters of query, and
// the whole of a pair whose name is not well encoded. Both "&" and ";"
// separate pairs: some parsers take either.
func redactQuery(query string) string {
	var b strings.Builder
	for i := 0; i < len(query); {
		j := strings.IndexAny(query[i:], "&;")
		end := len(query)
		if j >= 0 {
			end = i + j
		}
		pair := query[i:end]
		k, _, hasValue := strings.Cut(pair, "=")
		switch name, err := url.QueryUnescape(k); {
		case err != nil:
			b.WriteString(Mask)
			if hasValue {
				b.WriteString("=" + Mask)
			}
		case hasValue && IsSecretParam(name):
			b.WriteString(k + "=" + Mask)
		default:
			b.WriteString(pair)
		}
		if end < len(query) {
			b.WriteByte(query[end])
		}
		i = end + 1
	}
	return b.String()
}

// showableHost reports whether h is empty, or a host name or IP address
// with an optional numeric port: anything else may be a piece of a
// password in a mistyped URL.
func showableHost(h string) bool {
	host, port := h, ""
	if v6, ok := strings.CutPrefix(h, "["); ok {
		inside, after, ok := strings.Cut(v6, "]")
		if !ok || strings.ContainsFunc(inside, func(r rune) bool { return !hostChar(r) }) {
			return false
		}
		if after != "" {
			p, ok := strings.CutPrefix(after, ":")
			if !ok {
				return false
			}
			port = p
		}
		host = ""
	} else if i := strings.IndexByte(h, ':'); i >= 0 {
		host, port = h[:i], h[i+1:]
	}
	if strings.ContainsFunc(host, func(r rune) bool { return !hostChar(r) || r == ':' || r == '%' }) {
		return false
	}
	return len(port) <= 5 && !strings.ContainsFunc(port, func(r rune) bool { return r < '0' || r > '9' })
}

// secretParamWords are the pieces of a query parameter's name that make
// its value a secret.
var secretParamWords = []string{"pass", "pwd", "secret", "token", "auth", "cred", "apikey", "api_key", "api-key", "signature"}

// IsSecretParam reports whether the value of the query parameter name is
// never shown: its name, in any case, holds "pass", "pwd", "secret",
// "token", "auth", "cred", "apikey" or "signature".
func IsSecretParam(name string) bool {
	name = strings.ToLower(name)
	return slices.ContainsFunc(secretParamWords, func(w string) bool { return strings.Contains(name, w) })
}

// Secrets returns the strings that must not appear in a message about
// raw: its user information when it holds a password (a ":"), whole and
// its password alone, and the values of its secret query parameters, each
// as written and percent-decoded, and as URL encoders would write them.
// Longer ones come first. User information without a ":" is a user name,
// or a password written without one: see UserSecrets.
func Secrets(raw string) []string {
	var s []string
	if info, ok := userInfo(raw); ok && strings.Contains(info, ":") {
		_, pass, _ := strings.Cut(info, ":")
		s = forms(s, info)
		s = forms(s, pass)
	}
	// Secret parameters, wherever a "?" starts what may be a query.
	for q := raw; ; {
		i := strings.IndexByte(q, '?')
		if i < 0 {
			break
		}
		q = q[i+1:]
		for _, pair := range strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' || r == '#' || r == '?' }) {
			if k, v, ok := strings.Cut(pair, "="); ok {
				if name, err := url.QueryUnescape(k); err != nil || IsSecretParam(name) {
					s = forms(s, v)
				}
			}
		}
	}
	return sorted(s)
}

// UserSecrets returns, in the forms Secrets gives, the user information of
// raw when it holds no ":": a user name, or a password written without
// one. Scrub masks them only where they stand as words, and not at all
// when the user information is also a part of raw that is shown (its
// scheme, a host, a piece of its path), which a message may name in its
// own right: a user named postgres does not hide the scheme postgres://,
// nor a user ro the word "error".
func UserSecrets(raw string) []string {
	info, ok := userInfo(raw)
	if !ok || info == "" || strings.Contains(info, ":") || shownPart(raw, info) {
		return nil
	}
	return sorted(forms(nil, info))
}

// userInfo returns what stands between "//" (or the scheme's ":", or the
// start) and the last "@" of raw.
func userInfo(raw string) (string, bool) {
	_, rest, ok := Scheme(raw)
	if !ok {
		rest = raw
	}
	rest = strings.TrimPrefix(rest, "//")
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return "", false
	}
	return rest[:at], true
}

// shownPart reports whether info, percent-decoded, is the scheme of raw, a
// host name of it, or a piece of its path between "/": parts that Redact
// shows.
func shownPart(raw, info string) bool {
	scheme, rest, ok := Scheme(raw)
	u := &URL{Scheme: scheme}
	if !ok || u.split(rest) != nil {
		return false
	}
	user, err := url.PathUnescape(info)
	if err != nil || user == "" {
		return false
	}
	parts := []string{u.Scheme}
	for _, h := range u.Hosts {
		if hp, err := HostPort(h, "1"); err == nil {
			if host, _, err := net.SplitHostPort(hp); err == nil {
				parts = append(parts, host)
			}
		}
	}
	for _, p := range strings.Split(u.Path, "/") {
		if d, err := url.PathUnescape(p); err == nil {
			parts = append(parts, d)
		}
	}
	return slices.ContainsFunc(parts, func(p string) bool { return strings.EqualFold(p, user) })
}

// forms adds v to s, as written and percent-decoded, and as URL encoders
// would write it.
func forms(s []string, v string) []string {
	if v == "" {
		return s
	}
	s = append(s, v)
	for _, unescape := range []func(string) (string, error){url.PathUnescape, url.QueryUnescape} {
		if d, err := unescape(v); err == nil && d != "" {
			s = append(s, d, url.PathEscape(d), url.QueryEscape(d))
			// As url.URL.String writes a password.
			if _, e, ok := strings.Cut(url.UserPassword("", d).String(), ":"); ok {
				s = append(s, e)
			}
		}
	}
	return s
}

// sorted sorts s longest first, without repeats.
func sorted(s []string) []string {
	slices.SortStableFunc(s, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(s)
}

// Scrub returns err with the secrets of raw masked in its message: those
// of Secrets wherever they stand, those of UserSecrets where they stand as
// words (not glued to a letter or a digit), and neither within raw as
// Redact shows it, which holds none and is left whole. errors.Is and
// errors.As still see err's chain; errors.Unwrap does not reach the
// unmasked messages. A nil err gives nil; an err whose message holds no
// secret is returned as it is.
func Scrub(err error, raw string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	masked := mask(msg, Redact(raw), Secrets(raw), UserSecrets(raw))
	if masked == msg {
		return err
	}
	return &scrubbed{err: err, msg: masked}
}

// mask replaces the secrets and the user's words in msg, outside the
// occurrences of shown, until none is left (a mask next to what remains
// can form a secret again); a secret that is a piece of the mask itself
// cannot be removed and is left. Every round that changes msg shortens it
// or leaves fewer characters other than the mask's.
func mask(msg, shown string, secrets, words []string) string {
	for range len(msg) + 1 {
		before := msg
		for _, s := range secrets {
			msg = maskOutside(msg, shown, s, false)
		}
		for _, s := range words {
			msg = maskOutside(msg, shown, s, true)
		}
		if msg == before {
			break
		}
	}
	return msg
}

// maskOutside replaces by Mask the occurrences of s in msg but those
// within an occurrence of shown and, if word, those glued to a letter or
// a digit (see Glued).
func maskOutside(msg, shown, s string, word bool) string {
	if s == "" || strings.Contains(Mask, s) {
		return msg
	}
	var spans [][2]int
	for i := 0; shown != ""; {
		j := strings.Index(msg[i:], shown)
		if j < 0 {
			break
		}
		spans = append(spans, [2]int{i + j, i + j + len(shown)})
		i += j + len(shown)
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(msg); {
		j := strings.Index(msg[i:], s)
		if j < 0 {
			break
		}
		start, end := i+j, i+j+len(s)
		inside := slices.ContainsFunc(spans, func(sp [2]int) bool { return sp[0] <= start && end <= sp[1] })
		if inside || word && Glued(msg, start, end) {
			i = start + 1
			continue
		}
		b.WriteString(msg[last:start])
		b.WriteString(Mask)
		last, i = end, end
	}
	if last == 0 {
		return msg
	}
	b.WriteString(msg[last:])
	return b.String()
}

// Glued reports whether msg[start:end] is a piece of a longer word: a
// letter or digit (or any byte of a non-ASCII character) on one side of
// it touches one at its edge.
func Glued(msg string, start, end int) bool {
	return start > 0 && wordByte(msg[start-1]) && wordByte(msg[start]) ||
		end < len(msg) && wordByte(msg[end]) && wordByte(msg[end-1])
}

func wordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c >= 0x80
}

// scrubbed is an error with secrets masked in its message. It has no
// Unwrap: the errors it wraps would show them.
type scrubbed struct {
	err error
	msg string
}

func (e *scrubbed) Error() string        { return e.msg }
func (e *scrubbed) Is(target error) bool { return errors.Is(e.err, target) }
func (e *scrubbed) As(target any) bool   { return errors.As(e.err, target) }

// Format prints the masked message whatever the verb, %#v included.
func (e *scrubbed) Format(s fmt.State, _ rune) { io.WriteString(s, e.msg) }

// WithoutSecrets returns raw without its secrets, for handing a URL on to
// a program that should reach the same service without the credentials:
// the password is taken out of the user information (a user name before
// a ":" stays; user information without ":" may be a password alone and
// goes), secret query parameters and those whose name is not well encoded
// go, and so does a fragment. ok is false when raw cannot be cleaned with
// certainty, in the cases where Redact shows the scheme only.
func WithoutSecrets(raw string) (clean string, ok bool) {
	if raw == "" {
		return "", true
	}
	if Redact(raw) != raw && strings.HasSuffix(Redact(raw), hidden) {
		return "", false
	}
	scheme, rest, ok := Scheme(raw)
	if !ok {
		return raw, true // Redact showed it: no "@", ":", "?" nor "#"
	}
	scheme = raw[:len(scheme)]
	rest, ok = strings.CutPrefix(rest, "//")
	if !ok {
		return raw, true // likewise
	}
	var b strings.Builder
	b.WriteString(scheme + "://")
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass && user != "" {
			b.WriteString(user + "@")
		}
		rest = rest[at+1:]
	}
	rest, _, _ = strings.Cut(rest, "#")
	head, query, hasQuery := strings.Cut(rest, "?")
	b.WriteString(head)
	if !hasQuery {
		return b.String(), true
	}
	var kept []string
	for _, pair := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		k, _, _ := strings.Cut(pair, "=")
		if name, err := url.QueryUnescape(k); err == nil && !IsSecretParam(name) {
			kept = append(kept, pair)
		}
	}
	if len(kept) > 0 {
		b.WriteString("?" + strings.Join(kept, "&"))
	}
	return b.String(), true
}
