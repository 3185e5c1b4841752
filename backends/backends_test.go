package backends_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backends"
	"github.com/distlock/distlock/memlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const pw = "S3cret-pw"

func TestSchemes(t *testing.T) {
	got := backends.Schemes()
	want := []string{"distlock+http", "distlock+https", "etcd", "etcds", "postgres", "postgresql", "redlock", "redlocks",
		"redis", "redis+cluster", "redis+sentinel", "rediss", "rediss+cluster", "zk"}
	if runtime.GOOS != "windows" {
		want = append(want, "file")
	}
	for _, s := range want {
		if !slices.Contains(got, s) {
			t.Errorf("Schemes() = %q, missing %q", got, s)
		}
	}
	if !slices.IsSorted(got) {
		t.Errorf("Schemes() = %q, not sorted", got)
	}
}

// A URL without a backend: a clear error matching ErrUnknownScheme and
// ErrInvalidOption, without the password.
func TestOpenUnknown(t *testing.T) {
	ctx := context.Background()
	for raw, want := range map[string]string{
		"foo://u:" + pw + "@h": `unknown scheme "foo"`,
		"://u:" + pw + "@h":    "no scheme",
		"":                     "no scheme",
	} {
		_, err := backends.Open(ctx, raw)
		if !errors.Is(err, backends.ErrUnknownScheme) || !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("Open(%q): %v, want ErrUnknownScheme and ErrInvalidOption", raw, err)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "redis://") {
			t.Errorf("Open(%q): %v, want it to say %q and list the schemes", raw, err, want)
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("Open(%q) shows the password: %v", raw, err)
		}
	}
}

// Every scheme refuses a URL without "//" or without a host, at once,
// naming the expected form, without the password.
func TestOpenNeedsAHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, scheme := range backends.Schemes() {
		if scheme == "file" {
			continue // file:DIR is a relative directory; file:// the default one
		}
		if strings.HasPrefix(scheme, "test+") {
			continue // registered by TestRegister, which may run first (-shuffle)
		}
		for _, raw := range []string{
			scheme + ":default:" + pw + "@10.0.0.5:6380/0",
			scheme + ":/u:" + pw + "@h:1",
			scheme + "://",
			scheme + "://u:" + pw + "@",
			scheme + "://u:" + pw + "@/x",
		} {
			start := time.Now()
			b, err := backends.Open(ctx, raw)
			if err == nil {
				b.Close()
				t.Errorf("Open(%q) succeeded", raw)
				continue
			}
			if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "no host; want "+scheme+"://") {
				t.Errorf("Open(%q): %v, want ErrInvalidOption saying no host and the form", raw, err)
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("Open(%q) shows the password: %v", raw, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("Open(%q) took %v: it tried to connect", raw, d)
			}
		}
	}
}

// A registered backend is opened by its scheme; whatever its errors
// quote of the URL, Open masks the secrets.
// (The test schemes are registered once per test binary: -count runs the
// test again.)
var (
	registerOnce sync.Once
	registerSrv  = memlock.New()
	registerGot  atomic.Pointer[string]
)

func TestRegister(t *testing.T) {
	registerOnce.Do(func() {
		backends.Register(func(_ context.Context, raw string) (backends.Backend, error) {
			registerGot.Store(&raw)
			if strings.Contains(raw, "fail") {
				return nil, fmt.Errorf("%w: cannot reach %s (password %s)", distlock.ErrUnavailable, raw, pw)
			}
			return registerSrv, nil
		}, "test+mem", "test+mem2")
	})
	got := func() string {
		if p := registerGot.Load(); p != nil {
			return *p
		}
		return ""
	}
	ctx := context.Background()
	b, err := backends.Open(ctx, "TEST+MEM://somewhere")
	if err != nil || got() != "TEST+MEM://somewhere" {
		t.Fatalf("Open: %v (opener given %q)", err, got())
	}
	if b != backends.Backend(registerSrv) {
		t.Errorf("Open returned a %T, not the opener's own backend", b)
	}
	b.Close()
	if !slices.Contains(backends.Schemes(), "test+mem2") {
		t.Errorf("Schemes() = %q, without a registered scheme", backends.Schemes())
	}
	for _, raw := range []string{"test+mem://u:" + pw + "@fail", "test+mem://fail/?token=" + pw, "test+mem:u:" + pw + "@fail"} {
		_, err = backends.Open(ctx, raw)
		if !errors.Is(err, distlock.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach") {
			t.Errorf("Open(%q): %v, want the opener's error", raw, err)
		}
		if strings.Contains(err.Error(), pw) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), pw) {
			t.Errorf("Open(%q) shows the password: %v", raw, err)
		}
	}

	for name, register := range map[string]func(){
		"twice": func() {
			backends.Register(func(context.Context, string) (backends.Backend, error) { return nil, nil }, "test+mem")
		},
		"built-in": func() {
			backends.Register(func(context.Context, string) (backends.Backend, error) { return nil, nil }, "redis")
		},
		"upper case": func() {
			backends.Register(func(context.Context, string) (backends.Backend, error) { return nil, nil }, "Test")
		},
		"with colon": func() {
			backends.Register(func(context.Context, string) (backends.Backend, error) { return nil, nil }, "test://")
		},
		"nil": func() { backends.Register(nil, "test+nil") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register %s did not panic", name)
				}
			}()
			register()
		}()
	}
}
