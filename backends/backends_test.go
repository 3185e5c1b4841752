package backends_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backends"
	_ "github.com/distlock/distlock/gatewaylock" // registers distlock+http
	"github.com/distlock/distlock/memlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const pw = "S3cret-pw"

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
		"a backend's": func() {
			backends.Register(func(context.Context, string) (backends.Backend, error) { return nil, nil }, "distlock+http")
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
