package driver_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
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

// form takes the URLs of the schemes x and xs (over TLS).
var form = driver.URLForm{Pkg: "xlock", Schemes: []string{"x", "xs"}, TLSSchemes: []string{"xs"}}

// plainForm takes the URLs of the scheme x, without TLS.
var plainForm = driver.URLForm{Pkg: "xlock", Schemes: []string{"x"}}

// formOf takes the URLs of raw's scheme.
func formOf(raw string) driver.URLForm {
	scheme, _, _ := driver.Scheme(raw)
	return driver.URLForm{Pkg: "xlock", Schemes: []string{scheme}}
}

func TestParseURL(t *testing.T) {
	type parts struct {
		Scheme               string
		User, Password       string
		HasUser, HasPassword bool
		Hosts                []string
		Path                 string
	}
	for raw, want := range map[string]parts{
		"Redis://h":                   {Scheme: "redis", Hosts: []string{"h"}},
		"redis://u:p%40w@h1,h2/0?a=1": {Scheme: "redis", User: "u", Password: "p@w", HasUser: true, HasPassword: true, Hosts: []string{"h1", "h2"}, Path: "/0"},
		"etcd://u:p@s/?@h/x":          {Scheme: "etcd", User: "u", Password: "p@s/?", HasUser: true, HasPassword: true, Hosts: []string{"h"}, Path: "/x"},
		"x://h?o=-c%20a%3Db+c":        {Scheme: "x", Hosts: []string{"h"}},
		"redis://PW@h?x":              {Scheme: "redis", User: "PW", HasUser: true, Hosts: []string{"h"}},
	} {
		u, err := driver.ParseURL(raw, formOf(raw))
		if err != nil {
			t.Errorf("ParseURL(%q): %v", raw, err)
			continue
		}
		got := parts{u.Scheme, u.User, u.Password, u.HasUser, u.HasPassword, u.Hosts, u.Path}
		if !reflect.DeepEqual(got, want) || u.Shown != driver.Redact(raw) {
			t.Errorf("ParseURL(%q) = %+v, shown %q; want %+v", raw, got, u.Shown, want)
		}
	}
	// Printed, a URL is its Shown form.
	u, err := driver.ParseURL("x://u:PW@h", form)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%v %+v %#v %s", u, u, u, u); strings.Contains(got, "PW") {
		t.Errorf("a printed URL shows the password: %s", got)
	}
	// Percent-escapes are decoded in names and values, and "+" is a
	// plus, as libpq reads a query; a pair without "=" has an empty value.
	u, err = driver.ParseURL("x://h?o=-c%20a%3Db+c&%61=1&e", form)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := u.Get("o"); o != "-c a=b+c" {
		t.Errorf("o = %q, want %q", o, "-c a=b+c")
	}
	if a, _ := u.Get("a"); a != "1" {
		t.Errorf("a = %q, want 1", a)
	}
	if e, ok := u.Get("e"); e != "" || !ok {
		t.Errorf("e = %q, %v; want \"\", true", e, ok)
	}
	if err := u.Done(); err != nil {
		t.Errorf("Done: %v", err)
	}
}

func TestParseURLErrors(t *testing.T) {
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
		"redis://h?a=1;b=2":                nil,
		"redis://h?a=%00":                  nil,
		"redis://u:P\nW@h":                 nil,
	} {
		_, err := driver.ParseURL(raw, formOf(raw))
		if !errors.Is(err, driver.ErrInvalidOption) || want != nil && !errors.Is(err, want) {
			t.Errorf("ParseURL(%q): %v, want ErrInvalidOption and %v", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "PW") {
			t.Errorf("ParseURL(%q): the error quotes the URL: %v", raw, err)
		}
	}
	// Another scheme: the error names the form's.
	_, err := driver.ParseURL("y://u:PW@h", form)
	if want := `xlock: malformed backend URL "y://xxxxx@h": the scheme must be x or xs; want x://`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("another scheme: %v, want it to say %q", err, want)
	}
}

// A Local form (file:) takes URLs without "//" or without a host, and no
// user information.
func TestParseURLLocal(t *testing.T) {
	local := driver.URLForm{Pkg: "xlock", Schemes: []string{"file"}, Local: true}
	for raw, want := range map[string][2]string{
		"file:":                  {"[]", ""},
		"file://":                {"[]", ""},
		"file:///var/lib/x":      {"[]", "/var/lib/x"},
		"file://localhost/a%20b": {"[localhost]", "/a%20b"},
		"file:rel/dir":           {"[]", "rel/dir"},
	} {
		u, err := driver.ParseURL(raw, local)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", raw, err)
			continue
		}
		if hosts := fmt.Sprint(slices.DeleteFunc(u.Hosts, func(h string) bool { return h == "" })); hosts != want[0] || u.Path != want[1] {
			t.Errorf("ParseURL(%q): hosts %s, path %q; want %s, %q", raw, hosts, u.Path, want[0], want[1])
		}
	}
	for _, raw := range []string{"file://u:PW@/x", "file:PW@x", "file:///x#y"} {
		if _, err := driver.ParseURL(raw, local); !errors.Is(err, driver.ErrInvalidOption) || strings.Contains(err.Error(), "PW") {
			t.Errorf("ParseURL(%q): %v, want ErrInvalidOption without the password", raw, err)
		}
	}
}

// The parameters are taken by name; Done refuses the unknown ones and
// those given twice, and reports what the getters found wrong, without
// ever showing a value.
func TestURLParams(t *testing.T) {
	const pw = "PW-s3cret"
	for _, tc := range []struct {
		query string
		want  string // what Done says after "malformed backend URL ...: "; "" for nil
	}{
		{"a=1&d=2s&b=true&n=-3&s=x", ""},
		{"a=1&a=2", `parameter "a" given 2 times`},
		{"d=1s&d=1s&d=1s", `parameter "d" given 3 times`},
		{"zzz=1", `unknown parameter "zzz" (known: a, b, d, n, p, s)`},
		{"zzz=1&zzz=2", `unknown parameter "zzz" (known: a, b, d, n, p, s)`},
		{"zzz=1&yyy=" + pw, `unknown parameters "yyy" and "zzz" (known: a, b, d, n, p, s)`},
		{"Pass=" + pw, `unknown parameter (its name not shown) (known: a, b, d, n, p, s)`},
		{pw + "=1&" + pw + "x=1", `2 unknown parameters (names not shown) (known: a, b, d, n, p, s)`},
		{"q=1&" + pw + "=1", `unknown parameters "q" and 1 whose names are not shown (known: a, b, d, n, p, s)`},
		{"d=" + pw, `parameter "d": not a duration (such as 1.5s or 300ms)`},
		{"p=-1s", `parameter "p": not a positive duration`},
		{"b=" + pw, `parameter "b": not a boolean (true or false)`},
		{"n=" + pw, `parameter "n": not an integer`},
		{"old=1", `parameter "old": renamed a`},
		{"old=1&old=1", `parameter "old" given 2 times`},
		// In the order of the names, whatever the URL's.
		{"zzz=1&n=x&d=x&a=1&a=1&aaa=1", `parameter "a" given 2 times; unknown parameters "aaa" and "zzz" (known: a, b, d, n, p, s); parameter "d": not a duration (such as 1.5s or 300ms); parameter "n": not an integer`},
	} {
		u, err := driver.ParseURL("x://u:"+pw+"@h?"+tc.query, plainForm)
		if err != nil {
			t.Fatal(err)
		}
		u.Get("a")
		u.Bool("b")
		u.Duration("d")
		u.PositiveDuration("p")
		u.Int("n")
		u.Get("s")
		u.Refuse("old", "renamed a")
		err = u.Done()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.query, err)
			}
			continue
		}
		want := "distlock: invalid option: xlock: malformed backend URL " + strconv.Quote(u.Shown) + ": " + tc.want
		if err == nil || err.Error() != want {
			t.Errorf("%s:\n got %v\nwant %s", tc.query, err, want)
		}
		if err != nil && strings.Contains(strings.TrimPrefix(err.Error(), "distlock: invalid option: xlock: malformed backend URL "+strconv.Quote(u.Shown)), pw) {
			t.Errorf("%s: the error shows a value or a name that is not one: %v", tc.query, err)
		}
		if !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("%s: %v does not match ErrInvalidOption", tc.query, err)
		}
	}
}

// The same URL gets the same error every time, whatever the order of its
// parameters.
func TestURLParamsStableError(t *testing.T) {
	names := []string{"ccc", "aaa", "bbb", "ddd", "d", "a", "eee", "fff"}
	var first string
	for i := range 100 {
		rand.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		var q []string
		for _, n := range names {
			q = append(q, n+"=x")
		}
		u, err := driver.ParseURL("x://h?a=1&"+strings.Join(q, "&"), plainForm)
		if err != nil {
			t.Fatal(err)
		}
		u.Duration("d")
		u.Get("a")
		got := strings.TrimPrefix(u.Done().Error(), "distlock: invalid option: xlock: malformed backend URL "+strconv.Quote(u.Shown)+": ")
		if i == 0 {
			first = got
		}
		if got != first {
			t.Fatalf("run %d: %q, first %q", i, got, first)
		}
	}
	if want := `parameter "a" given 2 times; unknown parameters "aaa", "bbb", "ccc", "ddd", "eee" and "fff" (known: a, d); parameter "d": not a duration (such as 1.5s or 300ms)`; first != want {
		t.Errorf("got %q, want %q", first, want)
	}
}

// PassThrough takes the named parameters that are there; the others stay
// unknown. Secret takes only a name whose value Redact hides.
func TestURLPassThroughAndSecret(t *testing.T) {
	u, err := driver.ParseURL("x://h?lib_a=1&lib_b=x%20y&token=T&mine=2", plainForm)
	if err != nil {
		t.Fatal(err)
	}
	q := u.PassThrough("lib_a", "lib_b", "lib_c")
	if q.Encode() != "lib_a=1&lib_b=x+y" {
		t.Errorf("PassThrough = %q", q.Encode())
	}
	if v, ok := u.Secret("token"); v != "T" || !ok {
		t.Errorf("Secret(token) = %q, %v", v, ok)
	}
	if err := u.Done(); err == nil || !strings.Contains(err.Error(), `unknown parameter "mine" (known: lib_a, lib_b, lib_c, token)`) {
		t.Errorf("Done: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("Secret of a name whose value Redact shows did not panic")
		}
	}()
	u.Secret("mine")
}

// ca, cert and key are taken for the forms that have TLS schemes, and
// refused with their other schemes.
func TestURLTLSFiles(t *testing.T) {
	for raw, want := range map[string]string{
		"xs://h":                       "",
		"xs://h?ca=&cert=&key=":        "",
		"x://h?ca=":                    "",
		"x://h?ca=/c.pem":              `parameter "ca": needs xs://`,
		"xs://h?cert=/c.pem":           `parameter "cert": needs key`,
		"xs://h?key=/k.pem":            `parameter "key": needs cert`,
		"x://h?cert=/c.pem&key=/k.pem": `parameter "cert": needs xs://; parameter "key": needs xs://`,
		"xs://h?ca=/a&ca=/b":           `parameter "ca" given 2 times`,
	} {
		u, err := driver.ParseURL(raw, form)
		if err != nil {
			t.Fatal(err)
		}
		err = u.Done()
		if want == "" && err != nil || want != "" && (err == nil || !strings.HasSuffix(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
	u, err := driver.ParseURL("x://h", form)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := u.TLS(nil); cfg != nil || err != nil {
		t.Errorf("TLS of x:// = %v, %v; want nil, nil", cfg, err)
	}
	u, err = driver.ParseURL("xs://h?ca=/nonexistent/ca.pem", form)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.TLS(nil); !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), "CA file") {
		t.Errorf("TLS with a missing CA file: %v", err)
	}
	// A form without TLS schemes takes ca, cert and key as any other name.
	u, err = driver.ParseURL("x://h?ca=1", plainForm)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Done(); err == nil || !strings.HasSuffix(err.Error(), `unknown parameter "ca" (this URL takes none)`) {
		t.Errorf("ca without TLS schemes: %v", err)
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
