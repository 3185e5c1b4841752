package backends_test

import (
	"go/build"
	"strings"
	"testing"

	// The backends whose schemes the tests open: each registers itself.
	_ "github.com/distlock/distlock/etcdlock"
	_ "github.com/distlock/distlock/gatewaylock"
	_ "github.com/distlock/distlock/pglock"
	_ "github.com/distlock/distlock/redislock"
	_ "github.com/distlock/distlock/redlock"
	_ "github.com/distlock/distlock/zklock"
)

// Package backends imports no backend, on any system: a program builds
// only the backends it imports, and a backend may import backends to
// register itself without a cycle.
func TestImportsNoBackend(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		ctx := build.Default
		ctx.GOOS = goos
		pkg, err := ctx.ImportDir(".", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range pkg.Imports {
			if rest, ok := strings.CutPrefix(path, "github.com/distlock/distlock"); ok && rest != "/driver" {
				t.Errorf("on %s, package backends imports %s", goos, path)
			}
		}
	}
}
