package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
	"github.com/distlock/distlock/testserver"
)

func TestOpenURL(t *testing.T) {
	const password = "s3cret-Pa55word"
	srv := startRedis(t)
	ctx := testCtx(t)
	// Set after start: the readiness probe does not authenticate.
	if _, err := srv.Do("CONFIG", "SET", "requirepass", password); err != nil {
		t.Fatal(err)
	}

	b, err := redislock.OpenURL(ctx, fmt.Sprintf("redis://:%s@%s/3?prefix=app:&waiter_liveness=2s&dial_timeout=2s", password, srv.Addr))
	if err != nil {
		t.Fatalf("OpenURL: %v", err)
	}
	l, err := b.Acquire(ctx, "url", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The prefix and db from the URL are used.
	admin := newClient(t, srv.Addr)
	if err := admin.Do(ctx, "AUTH", password).Err(); err != nil {
		t.Fatal(err)
	}
	admin.Do(ctx, "SELECT", "3")
	if hs, err := b.List(ctx, ""); err != nil || len(hs) != 1 || hs[0].Key != "url" {
		t.Errorf("List = %v, %v", hs, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close closed the client OpenURL made: the lease cannot reach Redis.
	if err := l.Release(ctx); err == nil || errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("Release through a closed Backend's client: %v, want a closed-client error", err)
	}

	bad := map[string]string{
		"wrong password":      fmt.Sprintf("redis://:%s@%s/0", password+"-wrong", srv.Addr),
		"user and password":   fmt.Sprintf("redis://user:%s@%s/0", password, srv.Addr),
		"unreachable":         fmt.Sprintf("redis://:%s@%s/0?dial_timeout=1s", password, closedAddr(t)),
		"malformed":           fmt.Sprintf("redis://:%s@host:port:x/%%zz", password),
		"scheme":              fmt.Sprintf("mysql://:%s@%s/0", password, srv.Addr),
		"bad db":              fmt.Sprintf("redis://:%s@%s/x", password, srv.Addr),
		"bad option":          fmt.Sprintf("redis://:%s@%s/0?nope=1", password, srv.Addr),
		"bad unordered":       fmt.Sprintf("redis://:%s@%s/0?unordered=maybe", password, srv.Addr),
		"bad eviction":        fmt.Sprintf("redis://:%s@%s/0?eviction_allowed=perhaps", password, srv.Addr),
		"bad prefix":          fmt.Sprintf("redis://:%s@%s/0?prefix=a{", password, srv.Addr),
		"sentinel":            fmt.Sprintf("redis+sentinel://:%s@%s,%s/mymaster/0?dial_timeout=1s", password, closedAddr(t), closedAddr(t)),
		"sentinel no master":  fmt.Sprintf("redis+sentinel://:%s@%s", password, srv.Addr),
		"cluster unreachable": fmt.Sprintf("redis+cluster://:%s@%s,%s?dial_timeout=1s", password, closedAddr(t), closedAddr(t)),
		"cluster with a db":   fmt.Sprintf("redis+cluster://:%s@%s/1", password, srv.Addr),
		"cluster addr option": fmt.Sprintf("redis+cluster://:%s@%s?addr=%s", password, srv.Addr, srv.Addr),
		"cluster empty node":  fmt.Sprintf("redis+cluster://:%s@%s,", password, srv.Addr),
		"cluster not cluster": fmt.Sprintf("redis+cluster://:%s@%s?dial_timeout=1s", password, srv.Addr),
		"cluster bad port":    fmt.Sprintf("redis+cluster://:%s@127.0.0.1:abc,127.0.0.1:7001", password),
		"cluster port range":  fmt.Sprintf("redis+cluster://:%s@127.0.0.1:99999", password),
		"sentinel bad port":   fmt.Sprintf("redis+sentinel://:%s@127.0.0.1:abc/main", password),
		// The password as the URL writes it (escaped) must not show either.
		"cluster escaped password": "redis+cluster://:" + url.PathEscape(password+"/@;") + "@127.0.0.1:abc,127.0.0.1:7001",
	}
	for name, u := range bad {
		b, err := redislock.OpenURL(ctx, u)
		if err == nil {
			b.Close()
			t.Errorf("%s: OpenURL succeeded", name)
			continue
		}
		if strings.Contains(err.Error(), password) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), password) {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
		if !errors.Is(err, distlock.ErrInvalidOption) && !errors.Is(err, distlock.ErrUnavailable) {
			t.Errorf("%s: %v, want ErrInvalidOption or ErrUnavailable", name, err)
		}
		for e := errors.Unwrap(err); e != nil; e = errors.Unwrap(e) {
			if strings.Contains(e.Error(), password) {
				t.Errorf("%s: a wrapped error shows the password: %v", name, e)
			}
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := redislock.OpenURL(cctx, "redis://"+srv.Addr); !errors.Is(err, context.Canceled) {
		t.Errorf("OpenURL with a cancelled context: %v", err)
	}
}

func TestList(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	b := newBackend(t, srv.Addr)
	other := newBackend(t, srv.Addr, redislock.WithPrefix("other:"))
	keys := []string{"jobs/b", "jobs/a", "jobs/{x}*?", "mail/1", "jobs"}
	var held []driver.Lease
	for i, k := range keys {
		l, err := b.Acquire(ctx, k, driver.AcquireOptions{TTL: time.Minute, Owner: fmt.Sprintf("host:%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	if l, err := other.Acquire(ctx, "jobs/other-prefix", driver.AcquireOptions{TTL: time.Minute}); err != nil {
		t.Fatal(err)
	} else {
		defer l.Release(ctx)
	}
	before := time.Now()
	hs, err := b.List(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hs {
		got = append(got, h.Key)
	}
	if want := []string{"jobs/a", "jobs/b", "jobs/{x}*?"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("List(jobs/) keys = %q, want %q", got, want)
	}
	for _, h := range hs {
		i := map[string]int{"jobs/b": 0, "jobs/a": 1, "jobs/{x}*?": 2}[h.Key]
		if h.Token != held[i].Token() || h.Owner != fmt.Sprintf("host:%d", i) {
			t.Errorf("%s: token %d owner %q, want %d %q", h.Key, h.Token, h.Owner, held[i].Token(), fmt.Sprintf("host:%d", i))
		}
		if h.Since.IsZero() || h.Expires.Before(before) || h.Expires.After(before.Add(2*time.Minute)) {
			t.Errorf("%s: since %v expires %v", h.Key, h.Since, h.Expires)
		}
	}
	if hs, err := b.List(ctx, ""); err != nil || len(hs) != len(keys) {
		t.Errorf("List(\"\") = %d holders, %v; want %d", len(hs), err, len(keys))
	}
	if hs, err := b.List(ctx, "none/"); err != nil || len(hs) != 0 {
		t.Errorf("List(none/) = %v, %v", hs, err)
	}
	for _, l := range held {
		l.Release(ctx)
	}
	if hs, err := b.List(ctx, ""); err != nil || len(hs) != 0 {
		t.Errorf("List after release = %v, %v", hs, err)
	}
}

// rediss:// with ca, cert and key against a TLS-only server that requires
// client certificates; TLS problems are named by OpenURL, and the TLS
// options are refused where they cannot apply.
func TestOpenURLTLS(t *testing.T) {
	srv := startRedis(t, testserver.WithRedisTLS())
	ctx := testCtx(t)
	f := srv.TLS
	files := f.Query()

	b, err := redislock.OpenURL(ctx, "rediss://"+srv.Addr+"?"+files)
	if err != nil {
		t.Fatalf("OpenURL over TLS: %v", err)
	}
	defer b.Close()
	l, err := b.Acquire(ctx, "tls", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("Acquire over TLS: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Plain text to the TLS port: OpenURL says to use rediss://.
	if b, err := redislock.OpenURL(ctx, "redis://"+srv.Addr+"?dial_timeout=1s"); err == nil {
		b.Close()
		t.Error("OpenURL in plain text against a TLS-only server succeeded")
	} else if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "rediss://") {
		t.Errorf("plain text against TLS: %v, want ErrInvalidOption naming rediss://", err)
	}
	f.CheckTLSRefused(t, func(query string) (io.Closer, error) {
		return redislock.OpenURL(ctx, "rediss://"+srv.Addr+"?"+query)
	}, func(err error) bool { return errors.Is(err, distlock.ErrUnavailable) })
	for name, raw := range map[string]string{
		"files with redis://":          "redis://" + srv.Addr + "?" + files,
		"files with redis+sentinel://": "redis+sentinel://" + srv.Addr + "/main?" + files,
		"cert without key":             "rediss://" + srv.Addr + "?cert=" + url.QueryEscape(f.ClientCertFile),
		"missing CA file":              "rediss://" + srv.Addr + "?ca=/nonexistent/ca.pem",
	} {
		t.Run(name, func(t *testing.T) {
			b, err := redislock.OpenURL(ctx, raw)
			if err == nil {
				b.Close()
				t.Fatal("OpenURL accepted it")
			}
			if !errors.Is(err, distlock.ErrInvalidOption) {
				t.Errorf("error %v, want ErrInvalidOption", err)
			}
		})
	}
}

// Every form needs "//" and a host. Without them a URL used to reach
// localhost:6379 (the forms without "//"), panic (redis+cluster:), or
// quote the password in its error; now it is refused, naming the forms.
func TestOpenURLNeedsAHost(t *testing.T) {
	const pw = "PA55w0rd"
	for _, raw := range []string{
		"redis:default:" + pw + "@10.0.0.5:6380/0",
		"rediss:default:" + pw + "@10.0.0.5:6380/0",
		"redis+sentinel:default:" + pw + "@10.0.0.5:26379/main",
		"redis+cluster:",
		"rediss+cluster:",
		"redis+cluster:u:" + pw + "@h:1",
		"redis:/u:" + pw + "@h:1",
		"redis:///u:" + pw + "@h:p",
		"redis://",
		"redis://:" + pw + "@/0",
	} {
		t.Run(raw, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panic: %v", p)
					}
				}()
				var b *redislock.Backend
				if b, err = redislock.OpenURL(ctx, raw); err == nil {
					b.Close()
				}
			}()
			if !errors.Is(err, distlock.ErrInvalidOption) {
				t.Errorf("OpenURL: %v, want ErrInvalidOption", err)
			}
			if err != nil && strings.Contains(err.Error(), pw) {
				t.Errorf("OpenURL shows the password: %v", err)
			}
		})
	}
}

// Options given to OpenURL apply after the URL's.
func TestOpenURLOptions(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	b, err := redislock.OpenURL(ctx, "redis://"+srv.Addr+"/0?prefix=from-url:", redislock.WithPrefix("from-option:"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.Acquire(ctx, "k", driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if keys, err := newClient(t, srv.Addr).Keys(ctx, "from-option:*").Result(); err != nil || len(keys) == 0 {
		t.Errorf("no key under the option's prefix: %q, %v", keys, err)
	}
	if _, err := redislock.OpenURL(ctx, "redis://"+srv.Addr, redislock.WithWaiterLiveness(time.Nanosecond)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("a bad option given to OpenURL: %v, want ErrInvalidOption", err)
	}
}
