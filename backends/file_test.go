//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package backends_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backends"
	"github.com/distlock/distlock/driver"
	_ "github.com/distlock/distlock/filelock" // registers file://
)

// A file:// backend lists its holders and closes.
func TestOpenFile(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b, err := backends.Open(ctx, "file://"+dir+"/locks")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	l, err := b.Acquire(ctx, "k", driver.AcquireOptions{TTL: distlock.MaxTTL})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	lister, ok := b.(driver.Lister)
	if !ok {
		t.Fatalf("a file:// backend (%T) is not a Lister", b)
	}
	if hs, err := lister.List(ctx, ""); err != nil || len(hs) != 1 || hs[0].Key != "k" {
		t.Errorf("List = %v, %v", hs, err)
	}
	if d, ok := b.(interface{ Dir() string }); !ok || d.Dir() != filepath.Join(dir, "locks") {
		t.Errorf("the backend does not name its directory")
	}
	_, err = backends.Open(ctx, "file://u:"+pw+"@/x")
	if !errors.Is(err, distlock.ErrInvalidOption) || strings.Contains(err.Error(), pw) {
		t.Errorf("file URL with a password: %v", err)
	}
}
