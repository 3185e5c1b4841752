package redisurl_test

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/redisurl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const pw = "S3cret-pw"

var form = redisurl.Form{
	Pkg:           "testlock",
	Schemes:       []string{"test", "tests"},
	TLSSchemes:    []string{"tests"},
	Want:          func(scheme string) string { return "want " + scheme + "://host" },
	UnknownScheme: " (tests:// for TLS)",
}

func noOptions(url.Values) error { return nil }

// Each step's error names the package and the problem, shows the URL
// redacted, and matches distlock.ErrInvalidOption.
func TestReadErrors(t *testing.T) {
	for raw, want := range map[string]string{
		"test:u:" + pw + "@h":            `testlock: malformed backend URL "test:(redacted)": no host; want test://host`,
		"http://u:" + pw + "@h":          "unsupported scheme; want ://host (tests:// for TLS)",
		"test://u:" + pw + "@h?ca=x.pem": "options ca, cert and key need tests://",
		"test://u:" + pw + "@h,h:0":      "host #2: bad port",
		"test://u:" + pw + "@h?addr=h2":  "not as addr parameters",
		"test://u:" + pw + "@h/x":        "invalid database number",
	} {
		err := read(raw)
		if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want ErrInvalidOption saying %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), pw) {
			t.Errorf("%q: the error shows the password: %v", raw, err)
		}
	}
}

// read runs the steps a backend takes, in the order redislock takes them.
func read(raw string) error {
	u, err := redisurl.Read(form, raw, noOptions)
	if err != nil {
		return err
	}
	addrs, err := u.Addrs("6379")
	if err != nil {
		return err
	}
	if err := u.NoAddrOption(); err != nil {
		return err
	}
	_, err = u.Options("redis", addrs[0], u.Path)
	return err
}

// A URL that reads: its hosts with default ports, the credentials given to
// go-redis's options but not to the URL it parses, the TLS files taken
// out of the query.
func TestRead(t *testing.T) {
	u, err := redisurl.Read(form, "tests://us%40r:p@ss/w@h1,[::1]:7000/2?ca=c.pem&dial_timeout=3s", noOptions)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := u.Addrs("6379")
	if err != nil || strings.Join(addrs, " ") != "h1:6379 [::1]:7000" {
		t.Fatalf("Addrs = %v, %v", addrs, err)
	}
	if u.CA != "c.pem" || u.Cert != "" || !u.HasTLSFiles() || u.Query.Has("ca") {
		t.Errorf("TLS files %q %q %q, query %v", u.CA, u.Cert, u.Key, u.Query)
	}
	if g := u.GoRedisURL("rediss", addrs[0], u.Path); g != "rediss://h1:6379/2?dial_timeout=3s" {
		t.Errorf("GoRedisURL = %q", g)
	}
	o, err := u.Options("rediss", addrs[0], u.Path)
	if err != nil {
		t.Fatal(err)
	}
	if o.Username != "us@r" || o.Password != "p@ss/w" || o.DB != 2 || o.DialTimeout != 3*time.Second || o.TLSConfig == nil {
		t.Errorf("options: user %q password %q db %d dial %v tls %v", o.Username, o.Password, o.DB, o.DialTimeout, o.TLSConfig != nil)
	}
	// A CA file that cannot be read fails when opening, without the password.
	if _, err := u.TLS(o.TLSConfig); !errors.Is(err, distlock.ErrInvalidOption) || strings.Contains(err.Error(), "p@ss") {
		t.Errorf("TLS with a missing CA file: %v", err)
	}
}

// Fail scrubs the URL's secrets from the error it wraps, and a nil
// sentinel leaves the error matching only what it wraps.
func TestFail(t *testing.T) {
	u, err := redisurl.Read(form, "test://:"+pw+"@h", noOptions)
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("auth " + pw + " refused")
	for _, sentinel := range []error{distlock.ErrUnavailable, nil} {
		err := u.Fail(sentinel, "PING", cause)
		if strings.Contains(err.Error(), pw) || !strings.HasPrefix(err.Error(), "testlock: ") && sentinel == nil {
			t.Errorf("Fail(%v) = %v", sentinel, err)
		}
		if errors.Is(err, distlock.ErrUnavailable) != (sentinel != nil) {
			t.Errorf("Fail(%v) = %v: matches ErrUnavailable %v", sentinel, err, sentinel == nil)
		}
	}
	if err := u.Fail(distlock.ErrInvalidOption, "the server expects TLS", nil); err.Error() != `distlock: invalid option: testlock: test://xxxxx@h: the server expects TLS` {
		t.Errorf("Fail without a cause = %q", err)
	}
}

// The option readers take what they read out of the query, and refuse a
// value of the wrong kind by naming the option.
func TestOptions(t *testing.T) {
	q := url.Values{"on": {"true"}, "off": {"0"}, "bad": {"maybe"}, "d": {"2s"}, "s": {"x"}}
	if on, set, err := redisurl.Bool(q, "on"); !on || !set || err != nil || q.Has("on") {
		t.Errorf("Bool(on) = %v, %v, %v", on, set, err)
	}
	if on, set, err := redisurl.Bool(q, "off"); on || !set || err != nil {
		t.Errorf("Bool(off) = %v, %v, %v", on, set, err)
	}
	if _, _, err := redisurl.Bool(q, "bad"); err == nil || err.Error() != "option bad: not a boolean" {
		t.Errorf("Bool(bad): %v", err)
	}
	if _, set, err := redisurl.Bool(q, "none"); set || err != nil {
		t.Errorf("Bool(none) = %v, %v", set, err)
	}
	if d, set, err := redisurl.Duration(q, "d"); d != 2*time.Second || !set || err != nil || q.Has("d") {
		t.Errorf("Duration(d) = %v, %v, %v", d, set, err)
	}
	if _, _, err := redisurl.Duration(q, "s"); err == nil || err.Error() != "option s: not a duration" {
		t.Errorf("Duration(s): %v", err)
	}
	if v, set := redisurl.String(q, "s"); v != "x" || !set || q.Has("s") {
		t.Errorf("String(s) = %q, %v", v, set)
	}
}
