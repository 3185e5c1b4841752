package redislock

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/distlock/distlock"
)

// The forms of a Redis URL, read without I/O: node lists with IPv6 nodes
// and nodes without a port, user information with "@" and "/" in the
// password, and go-redis's options.
func TestParseURL(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://h":                          "single h:6379 db 0 user \"\" password \"\"",
		"redis://:p%40ss@[::1]:7000/3":       "single [::1]:7000 db 3 user \"\" password \"p@ss\"",
		"rediss://u:p/w@h:1?dial_timeout=3s": "single h:1 db 0 user \"u\" password \"p/w\" tls dial 3s",
		"redis+cluster://h1:7000,h2":         "cluster [h1:7000 h2:6379] user \"\" password \"\"",
		"redis+cluster://[::1]:7000,[::1],[fe80::1]:7002?dial_timeout=1s":       "cluster [[::1]:7000 [::1]:6379 [fe80::1]:7002] user \"\" password \"\" dial 1s",
		"rediss+cluster://u:p%40ss%2Fw@h1,h2:1":                                 "cluster [h1:6379 h2:1] user \"u\" password \"p@ss/w\" tls",
		"redis+sentinel://:pw@s1,[::1]:26380/main/2":                            "sentinel [s1:26379 [::1]:26380] main db 2 user \"\" password \"pw\"",
		"redis+sentinel://user:p%40ss@s1/main/3?pool_size=5":                    "sentinel [s1:26379] main db 3 user \"user\" password \"p@ss\" pool 5",
		"redis+cluster://user:p@ss@h1:7000,h2:7001?dial_timeout=3s&pool_size=7": "cluster [h1:7000 h2:7001] user \"user\" password \"p@ss\" dial 3s pool 7",
	} {
		u, err := parseURL(raw)
		if err != nil {
			t.Errorf("parseURL(%q): %v", raw, err)
			continue
		}
		if got := describeParsed(u); got != want {
			t.Errorf("parseURL(%q) = %s\nwant %s", raw, got, want)
		}
	}
}

func describeParsed(u *redisURL) string {
	var s string
	tls, dial, pool := false, "", 0
	switch {
	case u.single != nil:
		o := u.single
		s = fmt.Sprintf("single %s db %d user %q password %q", o.Addr, o.DB, o.Username, o.Password)
		tls, dial, pool = o.TLSConfig != nil, o.DialTimeout.String(), o.PoolSize
	case u.cluster != nil:
		o := u.cluster
		s = fmt.Sprintf("cluster %v user %q password %q", o.Addrs, o.Username, o.Password)
		tls, dial, pool = o.TLSConfig != nil, o.DialTimeout.String(), o.PoolSize
	default:
		o := u.failover
		s = fmt.Sprintf("sentinel %v %s db %d user %q password %q", o.SentinelAddrs, o.MasterName, o.DB, o.Username, o.Password)
		dial, pool = o.DialTimeout.String(), o.PoolSize
	}
	if tls {
		s += " tls"
	}
	if dial != "0s" && dial != "5s" {
		s += " dial " + dial
	}
	if pool != 0 {
		s += fmt.Sprintf(" pool %d", pool)
	}
	return s
}

// Every form needs "//" and a host: a URL without them used to reach
// localhost:6379 (the opaque forms), panic (redis+cluster:), or quote the
// password in its error.
func TestParseURLNeedsAHost(t *testing.T) {
	const pw = "PA55w0rd"
	for _, raw := range []string{
		"redis:default:" + pw + "@10.0.0.5:6380/0",
		"rediss:default:" + pw + "@10.0.0.5:6380/0",
		"redis+sentinel:default:" + pw + "@10.0.0.5:26379/main",
		"redis+cluster:",
		"rediss+cluster:",
		"redis+cluster:u:" + pw + "@h:1",
		"redis+cluster://",
		"redis+cluster://u:" + pw + "@",
		"redis+sentinel://u:" + pw + "@/main",
		"redis:/u:" + pw + "@h:1",
		"redis:///u:" + pw + "@h:p",
		"redis:///0",
		"redis://",
		"redis://:" + pw + "@/0",
	} {
		_, err := parseURL(raw)
		if !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("parseURL(%q): %v, want ErrInvalidOption", raw, err)
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("parseURL(%q) shows the password: %v", raw, err)
		}
		scheme, _, _ := strings.Cut(raw, ":")
		if !strings.Contains(err.Error(), "no host; want "+scheme+"://") && !strings.Contains(err.Error(), "bad port") {
			t.Errorf("parseURL(%q): %v; want it to name the expected form", raw, err)
		}
	}
	for _, bad := range []string{"redis+cluster://h:abc", "redis+cluster://h:0", "redis+cluster://h:65536", "redis+cluster://:7000",
		"redis+cluster://[::1", "redis+cluster://h1,", "redis://h1,h2", "redis+sentinel://h", "redis+sentinel://h/m/1/2",
		"redis+cluster://h/1", "redis+cluster://h?addr=h2", "redis://h#x", "redis://h/0?unordered=maybe"} {
		if _, err := parseURL(bad); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("parseURL(%q): %v, want ErrInvalidOption", bad, err)
		}
	}
}
