package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/etcdlock"
	"github.com/distlock/distlock/testserver"
)

func TestParseURL(t *testing.T) {
	for raw, want := range map[string]etcdlock.ParsedURL{
		"etcd://h1":                             {Endpoints: []string{"http://h1:2379"}, Prefix: "distlock/"},
		"etcd://h1:1234,h2,[::1]:99,[fe80::1]/": {Endpoints: []string{"http://h1:1234", "http://h2:2379", "http://[::1]:99", "http://[fe80::1]:2379"}, Prefix: "distlock/"},
		"etcd://h1/app/locks":                   {Endpoints: []string{"http://h1:2379"}, Prefix: "app/locks/"},
		"etcd://h1/a%20b%40c/":                  {Endpoints: []string{"http://h1:2379"}, Prefix: "a b@c/"},
		"etcds://h1:2379":                       {Endpoints: []string{"https://h1:2379"}, Prefix: "distlock/", TLS: true},
		"etcd://u%3Ax:p%2Fw@h1":                 {Endpoints: []string{"http://h1:2379"}, Prefix: "distlock/", User: "u:x", Password: "p/w"},
		"etcd://u:p/w@h1/x":                     {Endpoints: []string{"http://h1:2379"}, Prefix: "x/", User: "u", Password: "p/w"},
		// The user information ends at the last "@": a password may hold
		// "?", "#", "/" and "@", which cannot be in a host.
		"etcd://alice:hunter2?x@h1:2379":    {Endpoints: []string{"http://h1:2379"}, Prefix: "distlock/", User: "alice", Password: "hunter2?x"},
		"etcd://u:p@s#s/?@h1/x?ca=":         {Endpoints: []string{"http://h1:2379"}, Prefix: "x/", User: "u", Password: "p@s#s/?"},
		"etcd://u:p?w@h1,h2/x%40y?ca=&key=": {Endpoints: []string{"http://h1:2379", "http://h2:2379"}, Prefix: "x@y/", User: "u", Password: "p?w"},
		"etcd://h1?dial_timeout=1s&request_timeout=250ms": {Endpoints: []string{"http://h1:2379"}, Prefix: "distlock/",
			DialTimeout: time.Second, RequestTimeout: 250 * time.Millisecond},
	} {
		got, err := etcdlock.ParseURL(raw)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", raw, err)
			continue
		}
		if want.DialTimeout == 0 {
			want.DialTimeout = etcdlock.DefaultDialTimeout
		}
		if want.RequestTimeout == 0 {
			want.RequestTimeout = etcdlock.DefaultRequestTimeout
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ParseURL(%q) =\n%+v, want\n%+v", raw, got, want)
		}
	}
}

// Malformed URLs get a clear error matching ErrInvalidOption, and no error
// ever shows the password.
func TestOpenURLErrorsHideThePassword(t *testing.T) {
	const pw = "s3cr3t-Pw"
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	os.WriteFile(notPEM, []byte("not a certificate"), 0o600)
	ctx := testCtx(t)
	for _, raw := range []string{
		"redis://u:" + pw + "@h1",
		"u:" + pw + "@h1",
		"etcd://u:" + pw + "@",
		"etcd://u:" + pw + "@h1:notaport",
		"etcd://u:" + pw + "@h1:70000",
		"etcd://u:" + pw + "@h1,,h2",
		"etcd://u:" + pw + "@::1",
		"etcd://u:" + pw + "@h1/%zz",
		"etcd://u:" + pw + "%zz@h1",
		"etcd://:" + pw + "@h1",
		"etcd://u:" + pw + "@h1?bogus=1",
		"etcd://u:" + pw + "@h1?dial_timeout=soon",
		"etcd://u:" + pw + "@h1?%zz",
		"etcd://u:" + pw + "@h1?cert=/nonexistent",
		"etcd://u:" + pw + "@h1?ca=/nonexistent",
		"etcd://u:" + pw + "@h1?ca=" + notPEM,
		"etcd://u:" + pw + "/x@h1:bad",
		"etcd://u:" + pw + "?x@h1:2379?bogus=1",
		"etcd://u:" + pw + "?x@h1:notaport",
		"etcd://u:" + pw + "?x@",
		"etcd://u:" + pw + "?@h1:bad/x",
		"etcd://u:" + pw + "#x@h1,,h2",
		"etcd://u:" + pw + "/x?y@[h1",
		"etcd://u:" + pw + "@h1?dial_timeout=1s@h2:bad",
		"etcd://u%3A" + pw + "@h1",
		"etcd://" + pw + "@h1",
		"etcd://u@h1:" + pw,
		"etcd://h1:" + pw,
	} {
		b, err := etcdlock.OpenURL(ctx, raw)
		if err == nil {
			b.Close()
			t.Errorf("OpenURL(%q) succeeded", raw)
			continue
		}
		if !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("OpenURL(%q): %v, want ErrInvalidOption", raw, err)
		}
		if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("OpenURL(%q): the error shows the password: %v", raw, err)
		}
	}
}

// OpenURL against a real etcd with authentication: a wrong password is
// refused without showing it, the right one works, and the path sets the
// prefix.
func TestOpenURLAuth(t *testing.T) {
	e := testserver.StartEtcd(t)
	const pw = "r00t-Secret"
	e.Ctl(t, "user", "add", "root:"+pw)
	e.Ctl(t, "auth", "enable")
	ctx := testCtx(t)
	host := strings.TrimPrefix(e.Endpoints[0], "http://")

	_, err := etcdlock.OpenURL(ctx, "etcd://root:wrong-"+pw+"@"+host+"?dial_timeout=5s")
	if err == nil {
		t.Fatal("OpenURL with a wrong password succeeded")
	}
	if strings.Contains(err.Error(), pw) {
		t.Errorf("error shows the password: %v", err)
	}
	if errors.Is(err, distlock.ErrUnavailable) {
		t.Errorf("a wrong password is not worth retrying, got %v", err)
	}
	t.Logf("wrong password: %v", err)

	b, err := etcdlock.OpenURL(ctx, "etcd://root:"+pw+"@"+host+"/auth-test/locks")
	if err != nil {
		t.Fatalf("OpenURL: %v", err)
	}
	defer b.Close()
	if b.Prefix() != "auth-test/locks/" {
		t.Errorf("prefix %q", b.Prefix())
	}
	l, err := b.Acquire(ctx, "k", driver.AcquireOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	resp, err := b.Client().Get(ctx, "auth-test/locks/k/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Errorf("lock key under the URL's prefix: %v, %v", resp, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := b.Client().Get(ctx, "x"); err == nil {
		t.Errorf("the client OpenURL created is still open after Close")
	}

	// Unreachable: fails in bounded time with ErrUnavailable.
	b2, err := etcdlock.OpenURL(ctx, "etcd://127.0.0.1:"+itoa(testserver.FreePort(t))+"?request_timeout=300ms")
	if err != nil {
		t.Fatalf("OpenURL of a closed port: %v (the client dials lazily)", err)
	}
	defer b2.Close()
	if _, err := b2.Acquire(ctx, "k", driver.AcquireOptions{TTL: time.Second}); !errors.Is(err, distlock.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire from an unreachable etcd: %v, want ErrUnavailable", err)
	}
}

// etcds:// with ca, cert and key against a server that requires client
// certificates; without a client certificate, or without trusting its CA,
// OpenURL says what is wrong; in plain text the requests time out.
func TestOpenURLTLS(t *testing.T) {
	e := testserver.StartEtcd(t, testserver.WithEtcdTLS())
	ctx := testCtx(t)
	host := strings.TrimPrefix(e.Endpoints[0], "https://")
	b, err := etcdlock.OpenURL(ctx, "etcds://"+host+"/tls-test?"+e.TLS.Query())
	if err != nil {
		t.Fatalf("OpenURL over TLS: %v", err)
	}
	defer b.Close()
	l, err := b.Acquire(ctx, "k", driver.AcquireOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatalf("Acquire over TLS: %v", err)
	}
	// etcdctl, over TLS too, sees the lock key.
	if out := e.Ctl(t, "get", "--prefix", "--keys-only", "tls-test/k/"); !strings.Contains(out, "tls-test/k/") {
		t.Errorf("etcdctl does not see the lock key: %q", out)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}

	// Endpoints are checked at once, not one after another: the second is
	// dialed while the first, which accepts connections but never answers
	// the handshake, still holds its connection open.
	var (
		mu     sync.Mutex
		events []string
	)
	note := func(ev string) { mu.Lock(); events = append(events, ev); mu.Unlock() }
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var served sync.WaitGroup
	served.Go(func() {
		c, err := silent.Accept()
		if err != nil {
			return
		}
		note("silent accepted")
		io.Copy(io.Discard, c) // until the client gives up
		c.Close()
		note("silent closed")
	})
	served.Go(func() {
		c, err := other.Accept()
		if err != nil {
			return
		}
		note("other accepted")
		c.Close()
	})
	b2, err := etcdlock.OpenURL(ctx, "etcds://"+silent.Addr().String()+","+other.Addr().String()+"?dial_timeout=2s&"+e.TLS.Query())
	if err != nil {
		t.Fatalf("OpenURL of unreachable endpoints: %v (not a TLS refusal: the requests report it)", err)
	}
	b2.Close()
	silent.Close()
	other.Close()
	served.Wait()
	mu.Lock()
	got := fmt.Sprint(events)
	mu.Unlock()
	if i, j := strings.Index(got, "other accepted"), strings.Index(got, "silent closed"); i < 0 || j < 0 || i > j {
		t.Errorf("endpoints checked one after another: %s", got)
	}

	// A TLS failure is reported by OpenURL at once, and named.
	e.TLS.CheckTLSRefused(t, func(query string) (io.Closer, error) {
		return etcdlock.OpenURL(ctx, "etcds://"+host+"?"+query)
	}, func(err error) bool { return errors.Is(err, distlock.ErrUnavailable) })
	// Plain text to a TLS port: OpenURL says to use etcds://.
	t.Run("plain text", func(t *testing.T) {
		b, err := etcdlock.OpenURL(ctx, "etcd://"+host+"?request_timeout=1s&dial_timeout=1s")
		if err == nil {
			b.Close()
			t.Fatal("OpenURL in plain text against a TLS server succeeded")
		}
		if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "etcds://") {
			t.Fatalf("plain text against TLS: %v, want ErrInvalidOption naming etcds://", err)
		}
		t.Logf("%v", err)
	})
}

// Options given to OpenURL apply after the URL's.
func TestOpenURLOptions(t *testing.T) {
	e := testserver.StartEtcd(t)
	ctx := testCtx(t)
	host := strings.TrimPrefix(e.Endpoints[0], "http://")
	b, err := etcdlock.OpenURL(ctx, "etcd://"+host+"/from-url", etcdlock.WithPrefix("from-option/"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Prefix() != "from-option/" {
		t.Errorf("prefix %q, want the option's", b.Prefix())
	}
	if _, err := etcdlock.OpenURL(ctx, "etcd://"+host, etcdlock.WithRequestTimeout(-time.Second)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("a bad option given to OpenURL: %v, want ErrInvalidOption", err)
	}
}
