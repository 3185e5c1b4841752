//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
)

// Entries no key can be held through (a directory, a dangling symbolic
// link and a FIFO named like lock files), a lock file that is no lock
// file, a corrupt token counter and holder descriptions that are not
// regular files do not keep List from listing the holders: it passes over
// what cannot be held, without blocking on a FIFO.
func TestListPassesOverOddEntries(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	la := acquire(t, b, "a")
	defer release(t, la)
	lc, err := b.Acquire(ctxFor(t), "c", driver.AcquireOptions{TTL: time.Minute, Owner: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, lc)
	// c's token counter is overwritten while it is held.
	if err := os.WriteFile(b.KeyPath("c"), []byte(strings.Repeat("\xff", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	// A file of another program, held by it.
	writeFile(t, filepath.Join(dir, "n.lock"), "not a lock file\n", 0o600, os.Getuid())
	n, err := os.Open(filepath.Join(dir, "n.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := unix.Flock(int(n.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d.lock"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(dir, "s.lock")); err != nil {
		t.Fatal(err)
	}
	for _, fifo := range []string{"f.lock", "n.info"} {
		if err := syscall.Mkfifo(filepath.Join(dir, fifo), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// a's description becomes a FIFO too: opening it to read would block.
	info := filepath.Join(dir, "a.info")
	if err := os.Remove(info); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(info, 0o600); err != nil {
		t.Fatal(err)
	}

	type listing struct {
		hs  []driver.Holder
		err error
	}
	done := make(chan listing, 1)
	go func() {
		hs, err := newBackend(t, dir).List(context.Background(), "")
		done <- listing{hs, err}
	}()
	var got listing
	select {
	case got = <-done:
	case <-time.After(30 * time.Second):
		t.Errorf("List blocked on a FIFO named like a holder description")
		// Let the listing go (a writer that opens and closes a FIFO ends
		// its reader's wait), so that the failure is the only report.
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
	unblock:
		for {
			for _, fifo := range []string{"a.info", "n.info"} {
				if w, err := os.OpenFile(filepath.Join(dir, fifo), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
			}
			select {
			case got = <-done:
				break unblock
			case <-tick.C:
			}
		}
	}
	var keys []string
	for _, h := range got.hs {
		keys = append(keys, fmt.Sprintf("%s/%d/%s", h.Key, h.Token, h.Owner))
	}
	want := []string{fmt.Sprintf("a/%d/", la.Token()), fmt.Sprintf("c/%d/tester", lc.Token()), "n/0/"}
	if got.err != nil || !slices.Equal(keys, want) {
		t.Errorf("List = %q, %v; want %q (key/token/owner)", keys, got.err, want)
	}
}

// The helper that lists: the test binary run again with this variable set
// to a lock directory prints, as JSON, what List returned.
const (
	listDirEnv    = "FILELOCK_TEST_LIST_DIR"
	listPrefixEnv = "FILELOCK_TEST_LIST_PREFIX"
)

// listed is what the listing helper prints.
type listed struct {
	Keys      []string `json:"keys"`
	Err       string   `json:"err"`
	ListError bool     `json:"list_error"`
	Unread    []string `json:"unread"`
	Read      int      `json:"read"`
}

func listHelperMain() {
	b, err := filelock.New(os.Getenv(listDirEnv))
	if err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	hs, err := b.List(context.Background(), os.Getenv(listPrefixEnv))
	var out listed
	for _, h := range hs {
		out.Keys = append(out.Keys, h.Key)
	}
	if err != nil {
		out.Err = err.Error()
	}
	var le *filelock.ListError
	if out.ListError = errors.As(err, &le); out.ListError {
		for _, e := range le.Unread {
			out.Unread = append(out.Unread, e.Error())
		}
		out.Read = le.Read
	}
	json.NewEncoder(os.Stdout).Encode(out)
	os.Exit(0)
}

// A lock file the lister may not read is named in a *ListError, with the
// holders of the others; nothing listed when it is the only one under the
// prefix. The lister runs as another user: root reads every file.
func TestListReportsUnreadable(t *testing.T) {
	needRoot(t)
	// Somewhere the other user may reach: the lock directory, and a copy
	// of this test binary (the build directory is private).
	base, err := os.MkdirTemp("", "filelock-list-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(base, "filelock.test")
	copyFile(t, os.Args[0], self, 0o755)
	dir := filepath.Join(base, "locks")
	mkdir(t, dir, 0o755, 0)

	readable := newBackend(t, dir, filelock.WithFileMode(0o644))
	private := newBackend(t, dir)
	defer release(t, acquire(t, readable, "jobs/a"))
	defer release(t, acquire(t, private, "jobs/secret"))
	release(t, acquire(t, private, "jobs/idle")) // not held, and still unreadable

	list := func(prefix string) listed {
		t.Helper()
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), listDirEnv+"="+dir, listPrefixEnv+"="+prefix)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		cmd.Dir = base
		out, err := cmd.Output()
		var l listed
		if err != nil || json.Unmarshal(out, &l) != nil {
			t.Fatalf("listing as uid %d: %v: %s", nobody, err, out)
		}
		return l
	}
	l := list("jobs/")
	if !slices.Equal(l.Keys, []string{"jobs/a"}) || !l.ListError || l.Read != 1 || len(l.Unread) != 2 ||
		!strings.Contains(l.Unread[0], filepath.Join(dir, "jobs%2Fidle.lock")+": permission denied") ||
		!strings.Contains(l.Unread[1], filepath.Join(dir, "jobs%2Fsecret.lock")+": permission denied") {
		t.Errorf("List(jobs/) as another user = %+v; want jobs/a, and a ListError naming the two private lock files", l)
	}
	l = list("jobs/s")
	if len(l.Keys) != 0 || !l.ListError || l.Read != 0 || len(l.Unread) != 1 {
		t.Errorf("List(jobs/s) as another user = %+v; want no holder, a ListError with nothing read and one unread", l)
	}
}

// copyFile copies the file src to dst, with mode perm.
func copyFile(t *testing.T, src, dst string, perm os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
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

// The holder description (<name>.info) carries the token as a string of
// decimal digits, as every JSON of distlock does: a JSON number above 2^53
// loses digits in JavaScript. A description written with a number, as
// earlier builds wrote it, still names the holder.
func TestHolderDescriptionTokenIsADecimalString(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	l, err := b.Acquire(ctxFor(t), "a", driver.AcquireOptions{TTL: time.Minute, Owner: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	defer release(t, l)
	path := filepath.Join(dir, "a.info")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var in map[string]any
	if err := json.Unmarshal(data, &in); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint(l.Token())
	if in["token"] != want {
		t.Errorf("a.info: token %#v; want the string %q\n%s", in["token"], want, data)
	}
	// The same description with the token as a number.
	old := strings.Replace(string(data), `"token":"`+want+`"`, `"token":`+want, 1)
	if old == string(data) {
		t.Fatalf("a.info %s has no token to rewrite", data)
	}
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	hs, err := b.List(ctxFor(t), "a")
	if err != nil || len(hs) != 1 || hs[0].Owner != "tester" || hs[0].Token != l.Token() {
		t.Errorf("List over a description with a numeric token: %+v, %v; want a held by tester, token %d", hs, err, l.Token())
	}
}

// A reader's description the lister may not read is named in the
// *ListError, without hiding the key's other readers: the lock file was
// read, and counts in Read. The lister runs as another user.
func TestListReportsUnreadableReader(t *testing.T) {
	needRoot(t)
	base, err := os.MkdirTemp("", "filelock-list-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(base, "filelock.test")
	copyFile(t, os.Args[0], self, 0o755)
	dir := filepath.Join(base, "locks")
	mkdir(t, dir, 0o755, 0)

	readable := newBackend(t, dir, filelock.WithFileMode(0o644))
	private := newBackend(t, dir)
	for _, b := range []*filelock.Backend{readable, private} {
		r, err := b.AcquireShared(ctxFor(t), "jobs/r", driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer release(t, r)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), listDirEnv+"="+dir, listPrefixEnv+"=jobs/")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Dir = base
	out, err := cmd.Output()
	var l listed
	if err != nil || json.Unmarshal(out, &l) != nil {
		t.Fatalf("listing as uid %d: %v: %s", nobody, err, out)
	}
	if !slices.Equal(l.Keys, []string{"jobs/r"}) || !l.ListError || l.Read != 1 || len(l.Unread) != 1 ||
		!strings.Contains(l.Unread[0], "jobs%2Fr.reader.") || !strings.Contains(l.Unread[0], "permission denied") {
		t.Errorf("List(jobs/) as another user = %+v; want the readable reader of jobs/r, and a ListError naming the private one's description", l)
	}
}
