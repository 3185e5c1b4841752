//go:build linux

package cli_test

import (
	"os"
	"os/exec"
	"testing"
)

// The command and this package build (and vet) on the systems where the
// tests do not run: the other Unix systems, which have no parent-death
// signal, and Windows, which has neither the file:// backend nor run.
func TestBuildsElsewhere(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the command")
	}
	t.Parallel()
	for _, goos := range []string{"windows", "darwin", "freebsd"} {
		cmd := exec.Command("go", "vet", "github.com/distlock/distlock/cmd/distlock/internal/cli", "github.com/distlock/distlock/cmd/distlock")
		cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH=amd64")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GOOS=%s go vet: %v\n%s", goos, err, out)
		}
	}
}
