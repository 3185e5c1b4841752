//go:build linux

package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
)

// holdIn acquires key through a filelock Backend of this process over dir
// until the test ends.
func holdIn(t *testing.T, dir, key string, opts ...filelock.Option) driver.Lease {
	t.Helper()
	b, err := filelock.New(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Acquire(context.Background(), key, driver.AcquireOptions{TTL: time.Minute, Owner: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	return l
}

// A lock file that status cannot read does not hide the others: status
// lists them and names it on standard error, with --json and --watch
// too, and fails (exit 69) only when it could read no lock file under the
// prefix. status runs as another user: root reads every file.
func TestStatusListsAroundUnreadableLockFiles(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("running status as another user needs root")
	}
	e := newEnv(t)
	// Somewhere the other user may reach: the lock directory, and a copy
	// of distlock (the tests build it in a private directory).
	base, err := os.MkdirTemp("", "distlock-status-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	distlockBin := filepath.Join(base, "distlock")
	copyFile(t, bin, distlockBin)
	dir := filepath.Join(base, "locks")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a := holdIn(t, dir, "jobs/a", filelock.WithFileMode(0o644))
	holdIn(t, dir, "jobs/secret")
	holdIn(t, dir, "jobs/idle").Release(context.Background()) // not held, and unreadable still
	status := func(args ...string) *exec.Cmd {
		cmd := asNobody(exec.Command(distlockBin, append([]string{"--backend", "file://" + dir, "status"}, args...)...))
		cmd.Env, cmd.Dir = testEnviron(), base
		return cmd
	}
	unread := []string{
		"distlock: cannot tell whether a lock is held: open " + filepath.Join(dir, "jobs%2Fidle.lock") + ": permission denied\n",
		"distlock: cannot tell whether a lock is held: open " + filepath.Join(dir, "jobs%2Fsecret.lock") + ": permission denied\n",
	}

	r := e.wait(e.start(status()))
	if lines := strings.Split(r.stdout, "\n"); r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "jobs/a ") ||
		r.stderr != strings.Join(unread, "") {
		t.Errorf("status: exit %d, stdout %q, stderr %q; want jobs/a listed, and on stderr %q", r.code, r.stdout, r.stderr, unread)
	}

	r = e.wait(e.start(status("--json", "jobs/")))
	var hs []struct {
		Key   string `json:"key"`
		Token uint64 `json:"token,string"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &hs); err != nil || r.code != 0 || len(hs) != 1 ||
		hs[0].Key != "jobs/a" || hs[0].Token != a.Token() || r.stderr != strings.Join(unread, "") {
		t.Errorf("status --json jobs/: exit %d, stdout %q, stderr %q; want jobs/a with token %d, and on stderr %q",
			r.code, r.stdout, r.stderr, a.Token(), unread)
	}

	r = e.wait(e.start(status("jobs/s")))
	if r.code != cli.ExitUnavailable || r.stdout != "" ||
		r.stderr != unread[1]+"distlock: could not read any lock file under \"jobs/s\" on file://"+dir+"\n" {
		t.Errorf("status jobs/s: exit %d, stdout %q, stderr %q; want %d, and the one lock file under it named",
			r.code, r.stdout, r.stderr, cli.ExitUnavailable)
	}

	w := e.start(status("--watch", "--json"))
	waitFor(t, "the first listing of status --watch", func() bool { return strings.Contains(w.stdout.String(), "\n") })
	w.cmd.Process.Signal(syscall.SIGTERM)
	r = e.wait(w)
	if r.code != 0 || !strings.HasPrefix(r.stdout, `[{"key":"jobs/a",`) || !strings.HasPrefix(r.stderr, strings.Join(unread, "")) {
		t.Errorf("status --watch --json: exit %d, stdout %q, stderr %q; want jobs/a listed, and on stderr %q", r.code, r.stdout, r.stderr, unread)
	}
}

// Entries of a lock directory that are no lock files a key can be held
// through (a directory, a dangling symbolic link, a FIFO), a FIFO in place
// of a holder's description and a corrupt token counter leave status
// listing the holders.
func TestStatusPassesOverOddEntries(t *testing.T) {
	e := newEnv(t)
	held := e.hold("jobs/a")
	for _, mk := range []func() error{
		func() error { return os.Mkdir(filepath.Join(e.dir, "d.lock"), 0o700) },
		func() error { return os.Symlink("nowhere", filepath.Join(e.dir, "s.lock")) },
		func() error { return syscall.Mkfifo(filepath.Join(e.dir, "f.lock"), 0o600) },
		// The holder's description, replaced: opening it to read would block.
		func() error { return os.Remove(filepath.Join(e.dir, "jobs%2Fa.info")) },
		func() error { return syscall.Mkfifo(filepath.Join(e.dir, "jobs%2Fa.info"), 0o600) },
		func() error {
			return os.WriteFile(filepath.Join(e.dir, "c.lock"), []byte(strings.Repeat("\xff", 64)), 0o600)
		},
	} {
		if err := mk(); err != nil {
			t.Fatal(err)
		}
	}
	// c is held by another program, its counter corrupt.
	c, err := os.Open(filepath.Join(e.dir, "c.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := syscall.Flock(int(c.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	r := e.run("status")
	lines := strings.Split(r.stdout, "\n")
	if r.code != 0 || r.stderr != "" || len(lines) != 4 || !strings.HasPrefix(lines[1], "c  ") ||
		!strings.HasPrefix(lines[2], "jobs/a ") {
		t.Errorf("status: exit %d, stdout %q, stderr %q; want c and jobs/a listed", r.code, r.stdout, r.stderr)
	}
	held.release()
}

// copyFile copies the executable src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// partlyReadable returns a lock directory that another user (nobody) may
// list, and a copy of distlock that it may run, for tests where distlock
// runs as that user (root reads every file): jobs/a is held by this
// process, its lock file the other user's own, as if it had taken the
// lock before, and jobs/ab is held too, its lock file not readable by the
// other user.
func partlyReadable(t *testing.T) (distlockBin, dir string, a driver.Lease) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("running distlock as another user needs root")
	}
	base, err := os.MkdirTemp("", "distlock-partial-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	distlockBin = filepath.Join(base, "distlock")
	copyFile(t, bin, distlockBin)
	dir = filepath.Join(base, "locks")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a = holdIn(t, dir, "jobs/a")
	for _, f := range []string{"jobs%2Fa.lock", "jobs%2Fa.info"} {
		if err := os.Chown(filepath.Join(dir, f), nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	holdIn(t, dir, "jobs/ab")
	return distlockBin, dir, a
}

// run --no-wait names the holder of a held key also when a lock file
// under the key's name that it cannot read (another key's, jobs/ab beside
// jobs/a) makes the listing partial.
func TestRunNamesTheHolderAroundUnreadableLockFiles(t *testing.T) {
	e := newEnv(t)
	distlockBin, dir, a := partlyReadable(t)
	cmd := asNobody(exec.Command(distlockBin, "--backend", "file://"+dir, "run", "--no-wait", "jobs/a", "--", "true"))
	cmd.Env, cmd.Dir = testEnviron(), filepath.Dir(dir)
	r := e.wait(e.start(cmd))
	want := fmt.Sprintf("distlock: the lock on \"jobs/a\" is held by tester (token %d) (--no-wait)\n", a.Token())
	if r.code != cli.ExitNotAcquired || r.stderr != want {
		t.Errorf("run --no-wait: exit %d, stderr %q; want %d and %q", r.code, r.stderr, cli.ExitNotAcquired, want)
	}
}
