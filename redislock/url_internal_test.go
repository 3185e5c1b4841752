package redislock

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// Node lists of the Cluster and Sentinel forms: IPv6 nodes, nodes without
// a port, user information with "@" and "/" in the password.
func TestNodeLists(t *testing.T) {
	for _, c := range []struct {
		raw, defPort string
		want         []string
	}{
		{"redis+cluster://h1:7000,h2", "6379", []string{"h1:7000", "h2:6379"}},
		{"redis+cluster://[::1]:7000,[::1],[fe80::1]:7002?dial_timeout=1s", "6379", []string{"[::1]:7000", "[::1]:6379", "[fe80::1]:7002"}},
		{"rediss+cluster://u:p%40ss%2Fw@h1,h2:1", "6379", []string{"h1:6379", "h2:1"}},
		{"redis+sentinel://:pw@s1,[::1]:26380/main/2", "26379", []string{"s1:26379", "[::1]:26380"}},
	} {
		rest, nodes := splitNodes(c.raw)
		u, err := url.Parse(rest)
		if err != nil {
			t.Errorf("%s: the rest %q does not parse: %v", c.raw, rest, err)
			continue
		}
		if u.Host != nodesPlaceholder {
			t.Errorf("%s: host %q, want the placeholder", c.raw, u.Host)
		}
		addrs, err := nodeAddrs(nodes, c.defPort)
		if err != nil || fmt.Sprint(addrs) != fmt.Sprint(c.want) {
			t.Errorf("%s: nodes %q, %v; want %q", c.raw, addrs, err, c.want)
		}
	}
	if rest, nodes := splitNodes("redis://h:1/0"); rest != "redis://h:1/0" || nodes != nil {
		t.Errorf("a plain URL was split: %q %q", rest, nodes)
	}
	for _, bad := range [][]string{{""}, {"h:abc"}, {"h:0"}, {"h:65536"}, {":7000"}, {"[::1"}} {
		if _, err := nodeAddrs(bad, "6379"); err == nil {
			t.Errorf("nodes %q accepted", bad)
		}
	}

	// The options reach go-redis, the credentials do not pass through its
	// URL parser.
	rest, nodes := splitNodes("redis+cluster://user:p%40ss@h1:7000,h2:7001?dial_timeout=3s&pool_size=7")
	u, _ := url.Parse(rest)
	co, err := parseCluster(u, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(co.Addrs) != "[h1:7000 h2:7001]" || co.Username != "user" || co.Password != "p@ss" || co.PoolSize != 7 || co.DialTimeout.String() != "3s" {
		t.Errorf("ClusterOptions: addrs %v user %q password %q pool %d dial %v", co.Addrs, co.Username, co.Password, co.PoolSize, co.DialTimeout)
	}
	rest, nodes = splitNodes("redis+sentinel://user:p%40ss@s1/main/3?pool_size=5")
	u, _ = url.Parse(rest)
	fo, err := parseSentinel(u, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(fo.SentinelAddrs) != "[s1:26379]" || fo.MasterName != "main" || fo.DB != 3 || fo.Username != "user" || fo.Password != "p@ss" || fo.PoolSize != 5 {
		t.Errorf("FailoverOptions: %v %q db %d user %q password %q pool %d", fo.SentinelAddrs, fo.MasterName, fo.DB, fo.Username, fo.Password, fo.PoolSize)
	}
	if _, err := parseCluster(u, []string{"h:abc"}); err == nil || strings.Contains(err.Error(), "p@ss") {
		t.Errorf("bad node: %v", err)
	}
}
