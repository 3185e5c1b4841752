package redisurl_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redisurl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const pw = "S3cret-pw"

var form = driver.URLForm{Pkg: "testlock", Schemes: []string{"test", "tests"}, TLSSchemes: []string{"tests"}}

// read reads raw's go-redis options for a client of one server.
func read(t *testing.T, raw string) (*driver.URL, error) {
	t.Helper()
	u, err := driver.ParseURL(raw, form)
	if err != nil {
		t.Fatal(err)
	}
	q := redisurl.Query(u, false)
	if err := u.Done(); err != nil {
		return u, err
	}
	addrs, err := u.HostPorts("6379")
	if err != nil {
		return u, err
	}
	_, err = redisurl.Options(u, q, "redis", addrs[0], u.Path)
	return u, err
}

// go-redis's options are checked by kind before go-redis reads them, and
// addr, db and the options that are not passed on are refused, each
// error naming the option and never its value.
func TestQueryErrors(t *testing.T) {
	for query, want := range map[string]string{
		"dial_timeout=5":                  `parameter "dial_timeout": not a duration`,
		"pool_size=" + pw:                 `parameter "pool_size": not an integer`,
		"pool_fifo=" + pw:                 `parameter "pool_fifo": not a boolean`,
		"addr=h2":                         `parameter "addr": list the hosts before the path`,
		"db=2":                            `parameter "db": the db is the path`,
		"skip_verify=true":                `unknown parameter "skip_verify"`,
		"max_redirects=3":                 `unknown parameter "max_redirects"`,
		"idle_timeout=1s":                 `unknown parameter "idle_timeout"`,
		"read_timeout=1s&read_timeout=2s": `parameter "read_timeout" given 2 times`,
	} {
		u, err := read(t, "test://u:"+pw+"@h/1?"+query)
		if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want ErrInvalidOption saying %q", query, err, want)
		}
		if err != nil && strings.Contains(strings.Replace(err.Error(), u.Shown, "", 1), pw) {
			t.Errorf("%s: the error shows the password or a value outside the URL shown: %v", query, err)
		}
	}
	if _, err := read(t, "test://h/x"); !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "invalid database number") {
		t.Errorf("a db that is not a number: %v", err)
	}
}

// A URL that reads: the credentials given to go-redis's options but not
// to the URL it parses, the options by kind.
func TestOptions(t *testing.T) {
	u, err := driver.ParseURL("tests://us%40r:p@ss/w@h1:1,h2/2?dial_timeout=3s&pool_size=7&pool_fifo=1&client_name=a%20b&max_retries=-1", form)
	if err != nil {
		t.Fatal(err)
	}
	q := redisurl.Query(u, false)
	if err := u.Done(); err != nil {
		t.Fatal(err)
	}
	o, err := redisurl.Options(u, q, "rediss", "h1:1", u.Path)
	if err != nil {
		t.Fatal(err)
	}
	if o.Username != "us@r" || o.Password != "p@ss/w" || o.DB != 2 || o.DialTimeout != 3*time.Second || o.PoolSize != 7 ||
		!o.PoolFIFO || o.ClientName != "a b" || o.MaxRetries != -1 || o.TLSConfig == nil {
		t.Errorf("options: %+v", o)
	}
	co, err := redisurl.ClusterOptions(u, q, "rediss", []string{"h1:1", "h2:6379"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(co.Addrs, " ") != "h1:1 h2:6379" || co.Password != "p@ss/w" || co.PoolSize != 7 {
		t.Errorf("cluster options: %+v", co)
	}
	// A Cluster's own option.
	u, err = driver.ParseURL("test://h?max_redirects=2", form)
	if err != nil {
		t.Fatal(err)
	}
	q = redisurl.Query(u, true)
	if err := u.Done(); err != nil {
		t.Fatal(err)
	}
	if co, err := redisurl.ClusterOptions(u, q, "redis", []string{"h:1"}); err != nil || co.MaxRedirects != 2 {
		t.Errorf("ClusterOptions: %+v, %v", co, err)
	}
}
