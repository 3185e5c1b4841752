package schemes_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backends"

	// The backends whose schemes the tests open: each registers itself.
	_ "github.com/distlock/distlock/etcdlock"
	_ "github.com/distlock/distlock/filelock"
	_ "github.com/distlock/distlock/gatewaylock"
	_ "github.com/distlock/distlock/pglock"
	_ "github.com/distlock/distlock/redislock"
	_ "github.com/distlock/distlock/redlock"
	_ "github.com/distlock/distlock/zklock"
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
