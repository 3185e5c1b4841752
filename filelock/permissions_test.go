//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/filelock"
)

// nobody is the user that plays another local user in these tests.
const nobody = 65534

// needRoot skips a test that gives files to another user.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("giving files to another user (chown) needs root")
	}
}

// mkdir makes dir with the raw mode bits mode (sticky and setgid
// included), owned by uid.
func mkdir(t *testing.T, dir string, mode uint32, uid int) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// A lock directory, explicit or default, is refused when a user other
// than this one and root could remove or replace its lock files: it, a
// directory above it or a link on the way belongs to another user, or
// others (or, unless the Backend is shared with it, the group; above the
// lock directory, a group other than the lock directory's) can write to
// it without the sticky bit. The error names the path, its owner and its
// mode.
func TestLockDirPermissions(t *testing.T) {
	needRoot(t)
	shared := filelock.WithFileMode(0o660)
	for _, tc := range []struct {
		name string
		// layout makes the directories under base and returns the lock
		// directory and the path the error must name.
		layout func(t *testing.T, base string) (dir, bad string)
		opts   []filelock.Option
		want   []string // in the error, after the path; none: accepted
	}{
		{name: "private", layout: oneDir(0o700, 0)},
		{name: "readable by all", layout: oneDir(0o755, 0)},
		{name: "another user's, writable by all", layout: oneDir(0o777, nobody),
			want: []string{"(owner uid 65534, mode drwxrwxrwx)", "belongs to another user"}},
		{name: "another user's, private", layout: oneDir(0o700, nobody),
			want: []string{"(owner uid 65534, mode drwx------)", "belongs to another user"}},
		{name: "writable by all", layout: oneDir(0o777, 0),
			want: []string{"(owner uid 0, mode drwxrwxrwx)", "every user can write to it"}},
		{name: "sticky, writable by all", layout: oneDir(0o1777, 0)},
		{name: "sticky, writable by all, shared", layout: oneDir(0o1777, 0), opts: []filelock.Option{shared},
			want: []string{"mode dtrwxrwxrwx", "must not be writable by others"}},
		{name: "group-writable", layout: oneDir(0o770, 0),
			want: []string{"mode drwxrwx---", "members of group 0 can write to it"}},
		{name: "group-writable, shared", layout: oneDir(0o770, 0), opts: []filelock.Option{shared}},
		{name: "group-writable and setgid, shared", layout: oneDir(0o2770, 0), opts: []filelock.Option{shared}},
		{name: "shared, under a directory another group can write to", layout: func(t *testing.T, base string) (string, string) {
			// A member of that group who is not one of the lock
			// directory's could rename it away and put another in its
			// place.
			mkdir(t, filepath.Join(base, "p"), 0o770, 0)
			if err := os.Lchown(filepath.Join(base, "p"), 0, nobody); err != nil {
				t.Fatal(err)
			}
			mkdir(t, filepath.Join(base, "p", "locks"), 0o2770, 0)
			return filepath.Join(base, "p", "locks"), filepath.Join(base, "p")
		}, opts: []filelock.Option{shared},
			want: []string{"mode drwxrwx---), above lock directory ", "members of group 65534, not the lock directory's group 0,"}},
		{name: "shared, under a directory its group can write to", layout: func(t *testing.T, base string) (string, string) {
			mkdir(t, filepath.Join(base, "p"), 0o770, 0)
			mkdir(t, filepath.Join(base, "p", "locks"), 0o2770, 0)
			return filepath.Join(base, "p", "locks"), ""
		}, opts: []filelock.Option{shared}},
		{name: "under another user's directory", layout: func(t *testing.T, base string) (string, string) {
			mkdir(t, filepath.Join(base, "p"), 0o755, nobody)
			mkdir(t, filepath.Join(base, "p", "locks"), 0o700, 0)
			return filepath.Join(base, "p", "locks"), filepath.Join(base, "p")
		}, want: []string{"(owner uid 65534, mode drwxr-xr-x), above lock directory ", "belongs to another user"}},
		{name: "under a directory writable by all", layout: func(t *testing.T, base string) (string, string) {
			mkdir(t, filepath.Join(base, "p"), 0o777, 0)
			mkdir(t, filepath.Join(base, "p", "locks"), 0o700, 0)
			return filepath.Join(base, "p", "locks"), filepath.Join(base, "p")
		}, want: []string{"mode drwxrwxrwx", "every user can write to it"}},
		{name: "to be made under another user's directory", layout: func(t *testing.T, base string) (string, string) {
			mkdir(t, filepath.Join(base, "p"), 0o777, nobody)
			return filepath.Join(base, "p", "new", "locks"), filepath.Join(base, "p")
		}, want: []string{"owner uid 65534"}},
		{name: "through another user's link in a sticky directory", layout: func(t *testing.T, base string) (string, string) {
			mkdir(t, filepath.Join(base, "tmp"), 0o1777, 0)
			mkdir(t, filepath.Join(base, "locks"), 0o700, 0)
			link := filepath.Join(base, "tmp", "link")
			symlink(t, filepath.Join(base, "locks"), link, nobody)
			return link, link
		}, want: []string{"symbolic link", "owner uid 65534", "could point it elsewhere"}},
		{name: "through our link in a sticky directory", layout: func(t *testing.T, base string) (string, string) {
			mkdir(t, filepath.Join(base, "tmp"), 0o1777, 0)
			mkdir(t, filepath.Join(base, "locks"), 0o700, 0)
			link := filepath.Join(base, "tmp", "link")
			symlink(t, "../locks", link, 0)
			return link, ""
		}},
		{name: "through our link to another user's directory", layout: func(t *testing.T, base string) (string, string) {
			mkdir(t, filepath.Join(base, "locks"), 0o777, nobody)
			link := filepath.Join(base, "link")
			symlink(t, filepath.Join(base, "locks"), link, 0)
			return link, filepath.Join(base, "locks")
		}, want: []string{"(owner uid 65534, mode drwxrwxrwx)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, bad := tc.layout(t, t.TempDir())
			b, err := filelock.New(dir, tc.opts...)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("New(%s): %v", dir, err)
				}
				release(t, acquire(t, b, "k"))
				return
			}
			if err == nil {
				t.Fatalf("New(%s) accepted it", dir)
			}
			if !errors.Is(err, filelock.ErrUnsafe) {
				t.Errorf("New(%s): %v, want ErrUnsafe", dir, err)
			}
			if !strings.Contains(err.Error(), " "+bad+" (") {
				t.Errorf("New(%s): %v; want %s named", dir, err, bad)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New(%s): %v; want %q in it", dir, err, w)
				}
			}
		})
	}
	if _, err := filelock.New(t.TempDir(), filelock.WithFileMode(0o666)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("New with file mode 0666 (every user rewrites token counters): %v", err)
	}
}

// oneDir is a layout of one lock directory with mode and owner uid.
func oneDir(mode uint32, uid int) func(*testing.T, string) (string, string) {
	return func(t *testing.T, base string) (string, string) {
		dir := filepath.Join(base, "locks")
		mkdir(t, dir, mode, uid)
		return dir, dir
	}
}

// symlink makes a link to target owned by uid.
func symlink(t *testing.T, target, link string, uid int) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// In a lock directory where others may create entries (sticky and
// writable by all, like /tmp), a key whose lock file another user made,
// or that is a hard link to a file elsewhere, is refused before anything
// is written to it. A lock file others (or the group, unless the Backend
// is shared with it) can write to is refused wherever it is.
func TestLockFilePermissions(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name    string
		dirMode uint32
		opts    []filelock.Option
		// plant makes the lock file at path before Acquire; the test
		// checks that the file keeps the content it had.
		plant func(t *testing.T, path string)
		want  string // in the error; "": accepted
	}{
		{name: "another user's", dirMode: 0o1777, plant: func(t *testing.T, path string) {
			writeFile(t, path, "planted", 0o666, nobody)
		}, want: "(owner uid 65534, mode -rw-rw-rw-): it belongs to another user"},
		{name: "a hard link to a file of ours", dirMode: 0o1777, plant: func(t *testing.T, path string) {
			victim := filepath.Join(t.TempDir(), "precious")
			writeFile(t, victim, "precious data", 0o600, 0)
			if err := os.Link(victim, path); err != nil {
				t.Fatal(err)
			}
		}, want: "it has 2 names (hard links)"},
		{name: "a FIFO", dirMode: 0o1777, plant: func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, want: "not a regular file"},
		{name: "ours, writable by all", dirMode: 0o700, plant: func(t *testing.T, path string) {
			writeFile(t, path, "", 0o666, 0)
		}, want: "every user can rewrite its token counter"},
		{name: "ours, group-writable", dirMode: 0o700, plant: func(t *testing.T, path string) {
			writeFile(t, path, "", 0o660, 0)
		}, want: "members of group 0 can rewrite its token counter"},
		{name: "ours, group-writable, shared", dirMode: 0o770, opts: []filelock.Option{filelock.WithFileMode(0o660)},
			plant: func(t *testing.T, path string) { writeFile(t, path, "", 0o660, 0) }},
		{name: "another user's, group-writable, shared", dirMode: 0o770, opts: []filelock.Option{filelock.WithFileMode(0o660)},
			plant: func(t *testing.T, path string) { writeFile(t, path, "", 0o660, nobody) }},
		{name: "root's, in a sticky directory", dirMode: 0o1777, plant: func(t *testing.T, path string) {
			writeFile(t, path, "", 0o600, 0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "locks")
			mkdir(t, dir, tc.dirMode, 0)
			b := newBackend(t, dir, tc.opts...)
			path := b.KeyPath("k")
			tc.plant(t, path)
			before := content(t, path)
			l, err := tryAcquire(b, "k")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Acquire: %v", err)
				}
				release(t, l)
				return
			}
			if err == nil {
				release(t, l)
				t.Errorf("Acquire through the planted lock file succeeded")
			} else if !errors.Is(err, filelock.ErrUnsafe) || !strings.Contains(err.Error(), "lock file "+path+" ") ||
				!strings.Contains(err.Error(), tc.want) {
				t.Errorf("Acquire: %v; want ErrUnsafe naming %s and %q", err, path, tc.want)
			}
			if after := content(t, path); !bytes.Equal(after, before) {
				t.Errorf("the planted lock file was written: %q, was %q", after, before)
			}
		})
	}
}

// A holder writes its description through a temporary file it creates
// afresh: a name planted in its place, such as a hard link to a file
// elsewhere, is removed, never written through.
func TestInfoNotWrittenThroughPlantedFile(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	victim := filepath.Join(t.TempDir(), "precious")
	writeFile(t, victim, "precious data", 0o600, os.Getuid())
	if err := os.Link(victim, filepath.Join(dir, "k.info.tmp")); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, b, "k")
	defer release(t, l)
	if got := string(content(t, victim)); got != "precious data" {
		t.Errorf("the file linked as the description's temporary file was written: %q", got)
	}
	if hs, err := b.List(ctxFor(t), "k"); err != nil || len(hs) != 1 || hs[0].Token != l.Token() {
		t.Errorf("List = %+v, %v; want k with token %d", hs, err, l.Token())
	}
}

// writeFile writes data to a new file path with mode perm, owned by uid.
func writeFile(t *testing.T, path, data string, perm os.FileMode, uid int) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // whatever the umask
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
}

// content returns what the regular file path holds (nil for other kinds).
func content(t *testing.T, path string) []byte {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Refresh keeps an old holder description fresh through the file itself,
// never through a symbolic link put in its place: that would set the
// times of whatever file the link names.
func TestRefreshTouchesNoLinkedFile(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	l := acquire(t, b, "k")
	defer release(t, l)
	info := filepath.Join(dir, "k.info")
	old := time.Now().Add(-40 * 24 * time.Hour).Truncate(time.Second)
	age := func(path string) {
		t.Helper()
		if err := os.Chtimes(path, old, old); err != nil {
			t.Fatal(err)
		}
	}
	modified := func(path string) time.Time {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime()
	}
	age(b.KeyPath("k"))
	age(info)
	if _, err := l.Refresh(ctxFor(t), time.Minute); err != nil {
		t.Fatal(err)
	}
	if m := modified(info); m.Equal(old) {
		t.Errorf("an old holder description was not touched by Refresh")
	}

	victim := filepath.Join(t.TempDir(), "victim")
	writeFile(t, victim, "", 0o600, os.Getuid())
	age(victim)
	if err := os.Remove(info); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, info); err != nil {
		t.Fatal(err)
	}
	age(b.KeyPath("k"))
	if _, err := l.Refresh(ctxFor(t), time.Minute); err != nil {
		t.Fatal(err)
	}
	if m := modified(victim); !m.Equal(old) {
		t.Errorf("Refresh set the times of the file a link in place of the description names: modified %v, was %v", m, old)
	}
}
