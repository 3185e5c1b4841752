package backends_test

import (
	"go/build"
	"strings"
	"testing"
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
