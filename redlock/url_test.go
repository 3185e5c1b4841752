package redlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backends"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redlock"
	"github.com/distlock/distlock/testserver"
)

const pw = "S3cret-pw"

// Malformed URLs get ErrInvalidOption at once, naming the problem, never
// the password.
func TestOpenURLMalformed(t *testing.T) {
	ctx := testCtx(t)
	for raw, want := range map[string]string{
		"redlock://u:" + pw + "@":                             "no host; want redlock://",
		"redlocks:u:" + pw + "@h1":                            "no host; want redlocks://",
		"redlock://u:" + pw + "@h1:6379,h2,h1":                "h1:6379 is named twice",
		"redlock://u:" + pw + "@h1,h2,h3?request_timeout=x":   `parameter "request_timeout": not a duration`,
		"redlock://u:" + pw + "@h1,h2,h3?request_timeout=-1s": `parameter "request_timeout": not a positive duration`,
		"redlock://u:" + pw + "@h1,h2,h3?node_timeout=1s":     `parameter "node_timeout": renamed request_timeout`,
		"redlock://u:" + pw + "@h1,h2,h3?max_ttl=0s":          "max TTL 0s",
		"redlock://u:" + pw + "@h1,h2,h3?ca=/x.pem":           `parameter "ca": needs redlocks://`,
		"redlock://u:" + pw + "@h1,h2:99999":                  "host #2",
		"redlock://u:" + pw + "@h1,h2?addr=h3":                `parameter "addr": list the hosts before the path`,
		"redlock://u:" + pw + "@h1,h2?prefix=a{b":             "brace",
		"redis+redlock://u:" + pw + "@h1":                     "the scheme must be redlock or redlocks",
	} {
		start := time.Now()
		b, err := redlock.OpenURL(ctx, raw)
		if err == nil {
			b.Close()
			t.Errorf("OpenURL(%q) succeeded", raw)
			continue
		}
		if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenURL(%q): %v, want ErrInvalidOption saying %q", raw, err, want)
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("OpenURL(%q) shows the password: %v", raw, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("OpenURL(%q) took %v: it tried to connect", raw, d)
		}
	}
}

// Fewer than a majority of servers answering: ErrUnavailable naming the
// servers that did not, without the password.
func TestOpenURLUnreachable(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 1)
	down := []string{closedAddr(t), closedAddr(t)}
	raw := "redlock://u:" + pw + "@" + srvs[0].Addr + "," + strings.Join(down, ",") + "?dial_timeout=1s"
	_, err := redlock.OpenURL(ctx, raw)
	if !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("OpenURL with two of three servers down: %v, want ErrUnavailable", err)
	}
	for _, a := range down {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("the error does not name %s: %v", a, err)
		}
	}
	if strings.Contains(err.Error(), pw) {
		t.Errorf("the error shows the password: %v", err)
	}
}

// A URL opened through package backends (as the CLI does) locks, and
// lists what a majority holds, with one server down.
func TestOpenURLAndList(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3)
	raw := "redlock://" + strings.Join(addrs(srvs), ",") + "?request_timeout=500ms"
	bk, err := backends.Open(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	b := bk.(*redlock.Backend)
	nodes := b.Nodes()
	if len(nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(nodes))
	}
	for i, n := range nodes {
		if c, ok := n.(*redis.Client); !ok || c.Options().Addr != srvs[i].Addr {
			t.Errorf("node %d is %v, want the client of %s, in the URL's order", i+1, n, srvs[i].Addr)
		}
	}
	var want []uint64
	for _, key := range []string{"list/a", "list/b", "other/c"} {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Owner: "me:1"})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		want = append(want, l.Token())
	}
	srvs[1].Kill()
	hs, err := b.List(ctx, "list/")
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 2 || hs[0].Key != "list/a" || hs[1].Key != "list/b" {
		t.Fatalf("List = %+v, want list/a and list/b", hs)
	}
	for i, h := range hs {
		if h.Token != want[i] || h.Owner != "me:1" || h.Expires.Before(time.Now()) || h.Since.IsZero() {
			t.Errorf("holder %+v, want token %d, owner me:1, since and expiry set", h, want[i])
		}
	}
	// A grant on a minority is not listed: delete list/a from node 0.
	if _, err := srvs[0].Do("DEL", lockKey("list/a")); err != nil {
		t.Fatal(err)
	}
	hs, err = b.List(ctx, "list/")
	if err != nil || len(hs) != 1 || hs[0].Key != "list/b" {
		t.Fatalf("List after list/a lost its majority = %+v, %v", hs, err)
	}
	srvs[2].Kill()
	if _, err := b.List(ctx, ""); !errors.Is(err, distlock.ErrUnavailable) {
		t.Fatalf("List with two of three down: %v, want ErrUnavailable", err)
	}
}

// Plain text to servers that expect TLS: OpenURL says to use redlocks://
// rather than reporting the servers unreachable.
func TestOpenURLPlainTextToTLS(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3, testserver.WithRedisTLS())
	b, err := redlock.OpenURL(ctx, "redlock://"+strings.Join(addrs(srvs), ",")+"?dial_timeout=1s")
	if err == nil {
		b.Close()
		t.Fatal("OpenURL in plain text against TLS servers succeeded")
	}
	if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "expects TLS: use redlocks://") {
		t.Errorf("plain text against TLS: %v, want ErrInvalidOption naming redlocks://", err)
	}
}

// A paused server (SIGSTOP: its connections stay open, nothing is
// answered) holds neither OpenURL nor List for their timeout, nor Close
// after them: they need a majority, which answers at once.
func TestOpenURLAndListWithPausedServer(t *testing.T) {
	ctx := testCtx(t)
	srvs := startNodes(t, 3)
	raw := "redlock://" + strings.Join(addrs(srvs), ",")
	holder, err := redlock.OpenURL(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	l, err := holder.Acquire(ctx, "paused/held", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if err := srvs[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer srvs[2].Resume()
	// Far below the timeout (5s) that each waited for the paused server,
	// far above what a majority takes to answer.
	const bound = redlock.DefaultDialTimeout - time.Second
	timed := func(what string, f func()) {
		t.Helper()
		start := time.Now()
		f()
		if took := time.Since(start); took > bound {
			t.Errorf("%s with a server paused took %v, want at most %v", what, took, bound)
		}
	}
	var b *redlock.Backend
	timed("OpenURL", func() {
		if b, err = redlock.OpenURL(ctx, raw); err != nil {
			t.Fatal(err)
		}
	})
	timed("List", func() {
		hs, err := b.List(ctx, "paused/")
		if err != nil || len(hs) != 1 || hs[0].Token != l.Token() {
			t.Errorf("List = %+v, %v; want paused/held with token %d", hs, err, l.Token())
		}
	})
	timed("Close", func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}
