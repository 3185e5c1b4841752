//go:build linux

package cli_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
)

// onDefaultBackend returns distlock with args on the default backend: no
// DISTLOCK_BACKEND, no XDG_RUNTIME_DIR nor TMPDIR but those in extra.
func onDefaultBackend(extra []string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	for _, kv := range testEnviron() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "DISTLOCK_BACKEND" && name != "XDG_RUNTIME_DIR" && name != "TMPDIR" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, extra...)
	return cmd
}

// The default lock directory depends on the user only: a run from a login
// shell (XDG_RUNTIME_DIR and TMPDIR set) and one from a cron job (neither)
// lock the same file, so the second finds the key held. status --verbose
// and the help name that directory.
func TestDefaultDirIgnoresEnvironment(t *testing.T) {
	e := newEnv(t)
	dir := fmt.Sprintf("/var/tmp/distlock-%d", os.Getuid())
	key := fmt.Sprintf("distlock-cli-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		os.Remove(filepath.Join(dir, key+".lock"))
		os.Remove(filepath.Join(dir, key+".info"))
	})
	xdg, tmp := t.TempDir(), t.TempDir()
	pidFile := e.path("pid")
	holder := e.start(onDefaultBackend([]string{"XDG_RUNTIME_DIR=" + xdg, "TMPDIR=" + tmp},
		"run", key, "--", "sh", "-c", fmt.Sprintf("echo $$ > %s; exec sleep 600", sh(pidFile))))
	readInt(t, pidFile)

	if r := e.wait(e.start(onDefaultBackend(nil, "run", "--no-wait", key, "--", "true"))); r.code != cli.ExitNotAcquired {
		t.Errorf("a run without XDG_RUNTIME_DIR and TMPDIR while a run with them holds the key: exit %d, want %d; stderr %q",
			r.code, cli.ExitNotAcquired, r.stderr)
	}
	r := e.wait(e.start(onDefaultBackend([]string{"TMPDIR=" + tmp}, "--verbose", "status", key)))
	if r.code != 0 || !strings.Contains(r.stderr, "file://"+dir) || !strings.Contains(r.stdout, key) {
		t.Errorf("status --verbose: exit %d, stdout %q, stderr %q; want the holder, and %s named", r.code, r.stdout, r.stderr, dir)
	}
	for _, args := range [][]string{{"--help"}, {"run", "--help"}} {
		if r := e.wait(e.start(onDefaultBackend(nil, args...))); !strings.Contains(r.stdout, dir) {
			t.Errorf("%q does not name the default directory %s: %q", args, dir, r.stdout)
		}
	}
	holder.cmd.Process.Signal(syscall.SIGTERM)
	e.wait(holder)
}
