//go:build linux

package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
)

// nobody is the user that plays another local user in these tests.
const nobody = 65534

// An explicit lock directory that another user owns, writable by all, is
// refused as the default one would be (that user could remove a held lock
// file and let a second holder in): run runs nothing and creates nothing
// there, status lists nothing, and both name the directory, its owner
// and its mode.
func TestExplicitLockDirOfAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("giving a directory to another user (chown) needs root")
	}
	e := newEnv(t)
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	ran := e.path("ran")
	for _, args := range [][]string{
		{"--backend", "file://" + dir, "run", "k", "--", "touch", ran},
		{"--backend", "file://" + dir, "status"},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Env = testEnviron()
		r := e.wait(e.start(cmd))
		want := []string{"lock directory " + dir + " ", "owner uid 65534", "mode drwxrwxrwx", "belongs to another user"}
		ok := r.code == cli.ExitUnavailable
		for _, w := range want {
			ok = ok && strings.Contains(r.stderr, w)
		}
		if !ok {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", args[2:], r.code, r.stderr, cli.ExitUnavailable, want)
		}
	}
	if _, err := os.Stat(ran); err == nil {
		t.Errorf("the command ran with its lock in %s", dir)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files were made in the refused directory: %v", entries)
	}
}

// asNobody makes cmd run as the user nobody, with no other group.
func asNobody(cmd *exec.Cmd) *exec.Cmd {
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	return cmd
}
