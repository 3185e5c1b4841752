package schemes_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backends"
)

// urlCase is a URL of one scheme that opens without a parameter problem,
// and parameters it knows: each, given twice, is refused. A new backend
// adds its schemes here.
type urlCase struct {
	base   string
	params []string // name=value, valid once
}

var urlCases = map[string]urlCase{
	"file":           {"file:///nonexistent/distlock-url-test", nil},
	"redis":          {"redis://127.0.0.1:1/0", []string{"prefix=p", "dial_timeout=1s", "unordered=true"}},
	"rediss":         {"rediss://127.0.0.1:1/0", []string{"ca=/nonexistent/ca.pem", "read_timeout=1s"}},
	"redis+cluster":  {"redis+cluster://127.0.0.1:1", []string{"max_redirects=2", "eviction_allowed=true"}},
	"rediss+cluster": {"rediss+cluster://127.0.0.1:1", []string{"cert=/c.pem&key=/k.pem"}},
	"redis+sentinel": {"redis+sentinel://127.0.0.1:1/main", []string{"pool_size=2", "waiter_liveness=5s"}},
	"redlock":        {"redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", []string{"request_timeout=1s", "dial_timeout=1s", "max_ttl=1m"}},
	"redlocks":       {"redlocks://127.0.0.1:1", []string{"ca=/nonexistent/ca.pem", "prefix=p"}},
	"etcd":           {"etcd://127.0.0.1:1", []string{"request_timeout=1s", "dial_timeout=1s"}},
	"etcds":          {"etcds://127.0.0.1:1", []string{"ca=/nonexistent/ca.pem"}},
	"zk":             {"zk://127.0.0.1:1", []string{"session_timeout=1s", "request_timeout=1s"}},
	"postgres":       {"postgres://127.0.0.1:1/db", []string{"request_timeout=1s", "sslmode=disable", "mode=lease"}},
	"postgresql":     {"postgresql://127.0.0.1:1/db", []string{"application_name=a", "pool_max_conns=2", "poll_interval=1s"}},
	"distlock+http":  {"distlock+http://127.0.0.1:1", []string{"token=T0ken-value"}},
	"distlock+https": {"distlock+https://127.0.0.1:1", []string{"ca=/nonexistent/ca.pem"}},
}

// openErr opens raw, which must fail, and returns its error.
func openErr(t *testing.T, raw string) error {
	t.Helper()
	b, err := backends.Open(context.Background(), raw)
	if err == nil {
		b.Close()
		t.Fatalf("Open(%q) succeeded", raw)
	}
	if !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Open(%q): %v, want ErrInvalidOption", raw, err)
	}
	return err
}

// Every scheme has a case (but those this package's tests register).
func TestURLCasesCoverSchemes(t *testing.T) {
	for _, s := range backends.Schemes() {
		if _, ok := urlCases[s]; !ok && !strings.HasPrefix(s, "test+") {
			t.Errorf("no URL case for the scheme %s", s)
		}
	}
}

// A parameter given twice is refused by every backend, its own and those
// it passes on to a client library alike, naming the parameter. (It was
// refused by zklock only; etcdlock took the last value, pglock the first,
// redislock the first of its own and the last of go-redis's.)
func TestURLRepeatedParameter(t *testing.T) {
	for scheme, c := range urlCases {
		for _, p := range c.params {
			name, _, _ := strings.Cut(p, "=")
			t.Run(scheme+"/"+name, func(t *testing.T) {
				err := openErr(t, c.base+"?"+p+"&"+p)
				if want := `parameter "` + name + `" given 2 times`; err != nil && !strings.Contains(err.Error(), want) {
					t.Errorf("%v, want it to say %s", err, want)
				}
			})
		}
	}
}

// An unknown parameter is refused by every backend in the same words,
// with its name quoted and the known ones listed; a name that does not
// look like one is not shown. (pglock passed unknown parameters on to
// the server; zklock did not name them.)
func TestURLUnknownParameter(t *testing.T) {
	for scheme, c := range urlCases {
		t.Run(scheme, func(t *testing.T) {
			err := openErr(t, c.base+"?zzz_unknown=1")
			if want := `: unknown parameter "zzz_unknown" (`; err != nil && !strings.Contains(err.Error(), want) {
				t.Errorf("%v, want it to say %s", err, want)
			}
			err = openErr(t, c.base+"?S3cret%20Word=1")
			if want := `: unknown parameter (its name not shown) (`; err != nil && !strings.Contains(err.Error(), want) {
				t.Errorf("%v, want it to say %s", err, want)
			}
			if err != nil && strings.Contains(err.Error(), "S3cret Word") {
				t.Errorf("%v shows a name that does not look like one", err)
			}
		})
	}
}

// One URL gets one error, whatever the order of its parameters, 100 times
// over. (gatewaylock named one of several unknown parameters at random.)
func TestURLSameErrorEveryTime(t *testing.T) {
	for scheme, c := range urlCases {
		t.Run(scheme, func(t *testing.T) {
			params := append([]string{"ccc=1", "aaa=1", "bbb=1"}, c.params...)
			if len(c.params) > 0 {
				params = append(params, c.params[0])
			}
			var first string
			for i := range 100 {
				rand.Shuffle(len(params), func(i, j int) { params[i], params[j] = params[j], params[i] })
				raw := c.base + "?" + strings.Join(params, "&")
				err := openErr(t, raw)
				if err == nil {
					return
				}
				// The URL is shown as written: compare the rest.
				got := strings.Replace(err.Error(), backends.Redact(raw), "", 1)
				if i == 0 {
					first = got
					if !strings.Contains(got, `unknown parameters "aaa", "bbb" and "ccc"`) {
						t.Errorf("%v: the unknown parameters are not all named, in order", err)
					}
				}
				if got != first {
					t.Fatalf("run %d: %q\nfirst: %q", i, got, first)
				}
			}
		})
	}
}

// No error shows a secret: the password, or the value of a parameter
// whose name says it is secret, known or not, given once or twice.
func TestURLErrorsShowNoSecret(t *testing.T) {
	const secret = "S3cretValue"
	for scheme, c := range urlCases {
		t.Run(scheme, func(t *testing.T) {
			for _, raw := range []string{
				strings.Replace(c.base, "://", "://u:"+secret+"@", 1) + "?zzz=1",
				c.base + "?api_token=" + secret,
				c.base + "?password=" + secret,
				c.base + "?token=" + secret + "&token=" + secret,
				c.base + "?sslpassword=" + secret + "&sslpassword=x",
			} {
				if err := openErr(t, raw); err != nil && strings.Contains(err.Error(), secret) {
					t.Errorf("Open(...): the error shows the secret: %v", err)
				}
			}
		})
	}
}
