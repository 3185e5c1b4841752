package driver_test

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/distlock/distlock/driver"
)

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://h:6379/0":                           "redis://h:6379/0",
		"redis://u:PW@h:6379/0":                      "redis://xxxxx@h:6379/0",
		"redis://PW@h":                               "redis://xxxxx@h",
		"rediss://:PW@[::1]:6380,h2?dial_timeout=1s": "rediss://xxxxx@[::1]:6380,h2?dial_timeout=1s",
		"etcd://u:p/w?x@h1":                          "etcd://(redacted)",
		"etcd://u:p/w@h1/prefix":                     "etcd://xxxxx@h1/prefix",
		"file://":                                    "file://",
		"file:///var/lib/locks":                      "file:///var/lib/locks",
		"file:rel/dir":                               "file:rel/dir",
		"/var/locks":                                 "/var/locks",
		"://nohost":                                  "(redacted)",
		// Forms without "//" that hold user information.
		"redis:default:PW@10.0.0.5:6380/0":   "redis:(redacted)",
		"rediss:default:PW@10.0.0.5:6380/0":  "rediss:(redacted)",
		"redis+sentinel:u:PW@h:26379/master": "redis+sentinel:(redacted)",
		"etcd:u:PW@h":                        "etcd:(redacted)",
		"redis:/u:PW@h:p":                    "redis:(redacted)",
		"redis:///u:PW@h:p":                  "redis://(redacted)",
		"redis:default:PW":                   "redis:(redacted)",
		// Hosts that are not hosts may be pieces of a password.
		"redis://default:PW/0":                                       "redis://(redacted)",
		"etcd://h1:PW":                                               "etcd://(redacted)",
		"redis://user:PW@ho st:6379":                                 "redis://(redacted)",
		"redis://h/?password=a@PW":                                   "redis://(redacted)",
		"redis://h/0#frag":                                           "redis://h/0",
		"redis://h/0\nPW":                                            "redis:(redacted)",
		"postgres://u@h/db?password=PW":                              "postgres://xxxxx@h/db?password=xxxxx",
		"pg://h/db?sslmode=require&Pass%77ord=PW;x=1&a%zz=PW":        "pg://h/db?sslmode=require&Pass%77ord=xxxxx;x=1&xxxxx=xxxxx",
		"x://h?auth_token=PW&api_key=PW&client_secret=PW&key=/k.pem": "x://h?auth_token=xxxxx&api_key=xxxxx&client_secret=xxxxx&key=/k.pem",
	} {
		if got := driver.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for raw, want := range map[string]driver.URL{
		"Redis://h":                   {Scheme: "redis", Hosts: []string{"h"}, Query: url.Values{}},
		"redis://u:p%40w@h1,h2/0?a=1": {Scheme: "redis", User: "u", Password: "p@w", HasUser: true, HasPassword: true, Hosts: []string{"h1", "h2"}, Path: "/0", Query: url.Values{"a": {"1"}}, RawQuery: "a=1"},
		"etcd://u:p@s/?@h/x":          {Scheme: "etcd", User: "u", Password: "p@s/?", HasUser: true, HasPassword: true, Hosts: []string{"h"}, Path: "/x", Query: url.Values{}},
		"x://h?o=-c%20a%3Db+c":        {Scheme: "x", Hosts: []string{"h"}, Query: url.Values{"o": {"-c a=b c"}}, RawQuery: "o=-c%20a%3Db+c"},
		"redis://PW@h?x":              {Scheme: "redis", User: "PW", HasUser: true, Hosts: []string{"h"}, Query: url.Values{"x": {""}}, RawQuery: "x"},
	} {
		got, err := driver.ParseURL(raw)
		if err != nil || !reflect.DeepEqual(*got, want) {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for raw, want := range map[string]error{
		"redis:default:PW@10.0.0.5:6380/0": driver.ErrNoHost,
		"redis:/u:PW@h:p":                  driver.ErrNoHost,
		"redis://":                         driver.ErrNoHost,
		"redis://:PW@/0":                   driver.ErrNoHost,
		"redis+cluster:":                   driver.ErrNoHost,
		"redis:///u:PW@h:1":                driver.ErrNoHost,
		"://h":                             driver.ErrNoScheme,
		"1x://h":                           driver.ErrNoScheme,
		"redis://u:%zz@h":                  nil,
		"redis://h#x":                      nil,
		"redis://h?%zz":                    nil,
	} {
		_, err := driver.ParseURL(raw)
		if err == nil || want != nil && !errors.Is(err, want) {
			t.Errorf("ParseURL(%q): %v, want %v", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "PW") {
			t.Errorf("ParseURL(%q): the error quotes the URL: %v", raw, err)
		}
	}
}

func TestHostPort(t *testing.T) {
	for h, want := range map[string]string{"h": "h:1", "h:2": "h:2", "[::1]": "[::1]:1", "[fe80::1%eth0]:3": "[fe80::1%eth0]:3"} {
		if got, err := driver.HostPort(h, "1"); err != nil || got != want {
			t.Errorf("HostPort(%q) = %q, %v; want %q", h, got, err, want)
		}
	}
	for _, h := range []string{"", ":1", "h:0", "h:65536", "h:+1", "h:PW", "::1", "[::1", "ho st", "h/x", "[:0]:1", "[1.2.3.4]", "[h]"} {
		if got, err := driver.HostPort(h, "1"); err == nil {
			t.Errorf("HostPort(%q) = %q, want an error", h, got)
		} else if h != "" && strings.Contains(err.Error(), h) {
			t.Errorf("HostPort(%q): the error quotes the host: %v", h, err)
		}
	}
}

func TestScrub(t *testing.T) {
	const raw = "redis://u:p%2Fss@h/0?token=t%26k"
	inner := errors.New("dial redis://u:p%2Fss@h: p/ss rejected, token t&k")
	err := fmt.Errorf("wrapped: %w", driver.Scrub(inner, raw))
	for _, s := range []string{"p%2Fss", "p/ss", "t%26k", "t&k"} {
		if strings.Contains(err.Error(), s) || strings.Contains(fmt.Sprintf("%+v %#v", err, errors.Unwrap(err)), s) {
			t.Errorf("%q shows in %v", s, err)
		}
		for e := err; e != nil; e = errors.Unwrap(e) {
			if strings.Contains(e.Error(), s) {
				t.Errorf("%q shows in the wrapped %v", s, e)
			}
		}
	}
	if !errors.Is(err, inner) {
		t.Errorf("the scrubbed error does not match what it wraps")
	}
	if clean := errors.New("nothing secret"); driver.Scrub(clean, raw) != clean {
		t.Errorf("an error without secrets was replaced")
	}
}

// Scrub leaves the URL as Redact shows it whole, and does not take a user
// name (user information without a password) for a secret where it is
// only a piece of a word, nor where it is also the URL's scheme, a host or
// its database, which the message may name in their own right; a password
// is masked wherever it stands outside the redacted URL.
func TestScrubUserNames(t *testing.T) {
	for _, tc := range []struct{ raw, msg, want string }{
		{"postgres://postgres@db.internal:5432/postgres",
			"pglock: postgres://xxxxx@db.internal:5432/postgres: failed to connect to `user=postgres database=postgres`: dial error",
			"pglock: postgres://xxxxx@db.internal:5432/postgres: failed to connect to `user=postgres database=postgres`: dial error"},
		{"redis://redis@h:6379/0",
			"redislock: redis://xxxxx@h:6379/0: dial tcp h:6379: redis not ready",
			"redislock: redis://xxxxx@h:6379/0: dial tcp h:6379: redis not ready"},
		{"postgres://localhost@localhost/db",
			"pglock: postgres://xxxxx@localhost/db: 127.0.0.1:5432 (localhost): user=localhost: refused",
			"pglock: postgres://xxxxx@localhost/db: 127.0.0.1:5432 (localhost): user=localhost: refused"},
		{"postgres://ro@h/app",
			"pglock: postgres://xxxxx@h/app: server error: FATAL: role \"ro\" does not exist (user=ro)",
			"pglock: postgres://xxxxx@h/app: server error: FATAL: role \"xxxxx\" does not exist (user=xxxxx)"},
		{"redis://s3cret@h/0",
			"redislock: redis://xxxxx@h/0: AUTH s3cret: WRONGPASS",
			"redislock: redis://xxxxx@h/0: AUTH xxxxx: WRONGPASS"},
		// A password is masked outside the redacted URL even in a word.
		{"redis://:redis@h/0",
			"redislock: redis://xxxxx@h/0: AUTH redis: WRONGPASS",
			"xxxxxlock: redis://xxxxx@h/0: AUTH xxxxx: WRONGPASS"},
		{"postgres://u:db@db/db",
			"pglock: postgres://xxxxx@db/db: password db for u rejected",
			"pglock: postgres://xxxxx@db/db: password xxxxx for u rejected"},
	} {
		if got := driver.Scrub(errors.New(tc.msg), tc.raw).Error(); got != tc.want {
			t.Errorf("Scrub for %q:\n%q\nwant\n%q", tc.raw, got, tc.want)
		}
	}
}

func TestWithoutSecrets(t *testing.T) {
	for raw, want := range map[string]string{
		"":                       "",
		"file:///var/locks":      "file:///var/locks",
		"redis://alice:PW@h:1/0": "redis://alice@h:1/0",
		"redis://:PW@h":          "redis://h",
		"redis://PW@h":           "redis://h",
		"etcd://u:p/w@h1,h2/x?ca=/c.pem&password=PW;token=PW#f": "etcd://u@h1,h2/x?ca=/c.pem",
		"pg://h/db?%zz=PW&sslmode=require":                      "pg://h/db?sslmode=require",
	} {
		if got, ok := driver.WithoutSecrets(raw); !ok || got != want {
			t.Errorf("WithoutSecrets(%q) = %q, %v; want %q", raw, got, ok, want)
		}
	}
	for _, raw := range []string{"redis:default:PW@h", "redis://h:PW", "redis://u:PW?x@h", "redis://h/0\nPW", "://u:PW@h"} {
		if got, ok := driver.WithoutSecrets(raw); ok {
			t.Errorf("WithoutSecrets(%q) = %q, true; want false", raw, got)
		}
	}
}

// OtherSecret changes letters and digits, escapes included, but keeps
// each escape valid or not, and a NUL or not.
func TestOtherSecret(t *testing.T) {
	for s, want := range map[string]string{
		"s3cret":   "i8fhbj",
		"p%2Fw%zz": "z%7Cm%pp",
		"%00%55%0": "%00%55%5",
		"%5A%a":    "%0D%d",
		"":         "",
	} {
		if got := driver.OtherSecret(s); got != want {
			t.Errorf("OtherSecret(%q) = %q, want %q", s, got, want)
		}
	}
}
