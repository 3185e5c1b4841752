package driver

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The getters below take a parameter by name: they return its value
// (the first, if it is given more than once) and whether the URL has it,
// and note a value of the wrong kind as a problem of that name, returning
// it as absent. Each name a getter asks for is known to Done: ask for
// every name the package takes, whatever the URL holds, so that Done's
// list of known names does not depend on it. A value read is meaningful
// only once Done has returned nil.

// Get takes the parameter name.
func (u *URL) Get(name string) (string, bool) {
	u.asked[name] = true
	for _, p := range u.params {
		if p.name == name {
			return p.value, true
		}
	}
	return "", false
}

// Secret takes the parameter name, whose value is a secret. Every value
// is kept out of messages, but Redact shows a parameter's value unless
// IsSecretParam says its name is secret: Secret panics if it does not, a
// mistake in the backend's code that its first test shows.
func (u *URL) Secret(name string) (string, bool) {
	if !IsSecretParam(name) {
		panic(fmt.Sprintf("driver: URL.Secret(%q): Redact would show its value", name))
	}
	return u.Get(name)
}

// Bool takes the parameter name, written as strconv.ParseBool reads it
// (true, false, 1, 0, ...).
func (u *URL) Bool(name string) (value, set bool) {
	v, ok := u.Get(name)
	if !ok {
		return false, false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		u.Problem(name, "not a boolean (true or false)")
		return false, false
	}
	return b, true
}

// Int takes the parameter name, a decimal integer.
func (u *URL) Int(name string) (int, bool) {
	v, ok := u.Get(name)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		u.Problem(name, "not an integer")
		return 0, false
	}
	return n, true
}

// Duration takes the parameter name, a Go duration such as 1.5s or
// 300ms. Its range is for the option it sets to check.
func (u *URL) Duration(name string) (time.Duration, bool) {
	v, ok := u.Get(name)
	if !ok {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		u.Problem(name, "not a duration (such as 1.5s or 300ms)")
		return 0, false
	}
	return d, true
}

// PositiveDuration takes the parameter name, a Go duration greater than
// zero: a timeout.
func (u *URL) PositiveDuration(name string) (time.Duration, bool) {
	d, ok := u.Duration(name)
	if ok && d <= 0 {
		u.Problem(name, "not a positive duration")
		return 0, false
	}
	return d, ok
}

// PassThrough takes the parameters of names that the URL has, to be
// handed to a client library as they are (a value's checks are then the
// library's). Pass on a fixed list of the library's parameters, never
// "all the others": Done refuses what no getter asked for.
func (u *URL) PassThrough(names ...string) url.Values {
	q := url.Values{}
	for _, name := range names {
		if v, ok := u.Get(name); ok {
			q.Set(name, v)
		}
	}
	return q
}

// Problem notes what is wrong with the parameter name, for Done to
// report; format and args say what, without quoting its value (values
// are never shown). Only the first problem of a name is kept.
func (u *URL) Problem(name, format string, args ...any) {
	if _, ok := u.problems[name]; !ok {
		u.problems[name] = fmt.Sprintf(format, args...)
	}
}

// Refuse notes a problem with the parameter name, if the URL has it,
// without making it known: for a parameter a user may expect to work (a
// client library's that the package does not pass on, a former name),
// with the reason, such as "renamed request_timeout".
func (u *URL) Refuse(name, format string, args ...any) {
	if slices.ContainsFunc(u.params, func(p param) bool { return p.name == name }) {
		u.Problem(name, format, args...)
	}
}

// Done returns the URL's parameter problems as one error of Bad, or nil:
// the unknown parameters (those no getter asked for, listed once with
// the known ones), those given more than once (whether known or refused),
// and the problems noted by the getters, Problem and Refuse. They are
// reported in the order of their names, so that one URL always gets the
// same error. A name is quoted when it
// looks like one (a lower-case letter, then up to 31 lower-case letters,
// digits and "_"); any other is not shown, as it could be anything typed
// in the wrong place. No value is ever shown.
func (u *URL) Done() error {
	count := map[string]int{}
	for _, p := range u.params {
		count[p.name]++
	}
	var unknown []string
	for name := range count {
		if !u.asked[name] && u.problems[name] == "" {
			unknown = append(unknown, name)
		}
	}
	type problem struct{ name, msg string }
	var ps []problem
	if len(unknown) > 0 {
		slices.SortFunc(unknown, byShownName)
		ps = append(ps, problem{unknown[0], u.unknownText(unknown)})
	}
	for name := range maps.Keys(u.problems) {
		if count[name] < 2 {
			ps = append(ps, problem{name, "parameter " + shownName(name) + ": " + u.problems[name]})
		}
	}
	for name, n := range count {
		if n > 1 && (u.asked[name] || u.problems[name] != "") {
			ps = append(ps, problem{name, fmt.Sprintf("parameter %s given %d times", shownName(name), n)})
		}
	}
	if len(ps) == 0 {
		return nil
	}
	slices.SortFunc(ps, func(a, b problem) int {
		if c := byShownName(a.name, b.name); c != 0 {
			return c
		}
		return strings.Compare(a.msg, b.msg)
	})
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.msg
	}
	return u.Bad("%s", strings.Join(slices.Compact(msgs), "; "))
}

// unknownText says that the parameters names, sorted by byShownName, are
// unknown, and which are known.
func (u *URL) unknownText(names []string) string {
	var shown []string
	hidden := 0
	for _, n := range names {
		if looksLikeName(n) {
			shown = append(shown, strconv.Quote(n))
		} else {
			hidden++
		}
	}
	var msg string
	switch {
	case len(names) == 1:
		msg = "unknown parameter " + shownName(names[0])
	case hidden == 0:
		msg = "unknown parameters " + andList(shown)
	case hidden == len(names):
		msg = fmt.Sprintf("%d unknown parameters (names not shown)", hidden)
	default:
		msg = fmt.Sprintf("unknown parameters %s and %d whose names are not shown", strings.Join(shown, ", "), hidden)
	}
	known := slices.Sorted(maps.Keys(u.asked))
	if len(known) == 0 {
		return msg + " (this URL takes none)"
	}
	return msg + " (known: " + strings.Join(known, ", ") + ")"
}

// andList writes s as "a, b and c".
func andList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// shownName is name quoted for a message, or a placeholder when it does
// not look like a name.
func shownName(name string) string {
	if looksLikeName(name) {
		return strconv.Quote(name)
	}
	return "(its name not shown)"
}

// byShownName orders the names that a message shows first, by name, and
// the others after them.
func byShownName(a, b string) int {
	if la, lb := looksLikeName(a), looksLikeName(b); la != lb {
		if la {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// looksLikeName reports whether a message may show s as a parameter's
// name: a lower-case letter, then up to 31 lower-case letters, digits
// and "_".
func looksLikeName(s string) bool {
	if s == "" || len(s) > 32 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '_')
	})
}
