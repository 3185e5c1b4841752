//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

// Who may change the lock directory and the lock files: the rules of the
// package documentation (Permissions), checked by New and at each open of
// a lock file.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrUnsafe means that a user other than the current one and root could
// remove, replace or rewrite a lock file: the lock directory, a directory
// above it, a symbolic link on the way to it, or the lock file of a key
// has an owner or permissions that allow it (see Permissions in the
// package documentation). New refuses such a directory, Acquire such a
// lock file; the message names the path, its owner and its mode.
var ErrUnsafe = errors.New("filelock: unsafe owner or permissions")

// maxLinks bounds the symbolic links followed on the way to the lock
// directory, as the kernel does (ELOOP).
const maxLinks = 40

// unsafeErr reports path, a what with its owner and mode, as unsafe for
// why; where, if not empty, says where path is.
func unsafeErr(what, path, where string, st *syscall.Stat_t, mode fs.FileMode, why string) error {
	if where != "" {
		where = ", " + where
	}
	return fmt.Errorf("%w: %s %s (owner uid %d, mode %v)%s: %s", ErrUnsafe, what, path, st.Uid, mode, where, why)
}

// checkPath refuses the lock directory dir (absolute and existing) unless
// it, every directory above it and every symbolic link followed to reach
// it are safe from other users: owned by root or this user; not writable
// by others unless sticky; not writable by the group unless sticky or the
// Backend is shared with the group, the lock directory's (a directory
// above it that another group may write to lets that group's members
// replace it). The lock directory itself is held to more: in a shared
// Backend it must not be writable by others at all, since a lock file
// another user made there would be the group's lock.
// It walks the path as the kernel resolves it, so that a link an
// attacker could point elsewhere is caught where it lies.
func checkPath(dir string, shared bool) error {
	uid := uint32(os.Getuid())
	var group uint32 // the group a shared Backend trusts
	if shared {
		fi, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("filelock: lock directory %s: %w", dir, err)
		}
		group = fi.Sys().(*syscall.Stat_t).Gid
	}
	cur := "/"
	fi, err := os.Lstat(cur)
	if err != nil {
		return fmt.Errorf("filelock: lock directory %s: %w", dir, err)
	}
	if err := checkDir(dir, cur, fi, uid, shared, group, dir == "/"); err != nil {
		return err
	}
	todo, final := dir, dir == "/"
	for links := 0; ; {
		var name string
		name, todo = nextName(todo)
		switch name {
		case "":
			if final {
				return nil
			}
			// The path ended in "..": cur was checked, but not as the
			// lock directory.
			fi, err := os.Lstat(cur)
			if err != nil {
				return fmt.Errorf("filelock: lock directory %s: %w", dir, err)
			}
			return checkDir(dir, cur, fi, uid, shared, group, true)
		case ".":
			continue
		case "..":
			cur, final = filepath.Dir(cur), false // cur has no links in it: its parent is checked
			continue
		}
		p := filepath.Join(cur, name)
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("filelock: lock directory %s: %w", dir, err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&fs.ModeSymlink != 0 {
			if st.Uid != 0 && st.Uid != uid {
				return unsafeErr("symbolic link", p, "on the way to lock directory "+dir, st, fi.Mode(), "it belongs to another user, who could point it elsewhere")
			}
			if links++; links > maxLinks {
				return fmt.Errorf("filelock: lock directory %s: %w", dir, syscall.ELOOP)
			}
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("filelock: lock directory %s: %w", dir, err)
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			todo, final = target+"/"+todo, false
			continue
		}
		if !fi.IsDir() {
			return fmt.Errorf("filelock: lock directory %s: %s: %w", dir, p, syscall.ENOTDIR)
		}
		final = onlyDots(todo)
		if err := checkDir(dir, p, fi, uid, shared, group, final); err != nil {
			return err
		}
		cur = p
	}
}

// nextName splits the first name off a slash-separated path.
func nextName(path string) (name, rest string) {
	path = strings.TrimLeft(path, "/")
	name, rest, _ = strings.Cut(path, "/")
	return name, rest
}

// onlyDots reports whether path names nothing beyond where it starts.
func onlyDots(path string) bool {
	for _, n := range strings.Split(path, "/") {
		if n != "" && n != "." {
			return false
		}
	}
	return true
}

// checkDir applies the rules of checkPath to the directory p on the way
// to the lock directory dir (final: p is dir), whose group is group if
// the Backend is shared.
func checkDir(dir, p string, fi fs.FileInfo, uid uint32, shared bool, group uint32, final bool) error {
	st := fi.Sys().(*syscall.Stat_t)
	mode := fi.Mode()
	sticky := mode&fs.ModeSticky != 0
	what, where := "lock directory", ""
	if !final {
		what, where = "directory", "above lock directory "+dir
	}
	switch {
	case st.Uid != 0 && st.Uid != uid:
		return unsafeErr(what, p, where, st, mode, fmt.Sprintf("it belongs to another user, who could remove a held lock file; use a directory of your own (uid %d) or of root", uid))
	case mode&0o002 != 0 && !sticky:
		return unsafeErr(what, p, where, st, mode, "every user can write to it, and so remove a held lock file (chmod o-w, or +t)")
	case mode&0o002 != 0 && final && shared:
		return unsafeErr(what, p, where, st, mode, "every user can create lock files in it for the group to use; a directory shared with a group must not be writable by others (chmod o-w)")
	case mode&0o020 != 0 && !sticky && !shared:
		return unsafeErr(what, p, where, st, mode, fmt.Sprintf("members of group %d can write to it, and so remove a held lock file (chmod g-w; a Backend shared with the group, WithFileMode(0o660), accepts it)", st.Gid))
	case mode&0o020 != 0 && !sticky && !final && st.Gid != group:
		return unsafeErr(what, p, where, st, mode, fmt.Sprintf("members of group %d, not the lock directory's group %d, can write to it, and so replace the lock directory (chmod g-w)", st.Gid, group))
	}
	return nil
}

// checkLockFile refuses an open lock file that another user could change
// (see Permissions in the package documentation): one that is not a
// regular file, has another name (a hard link), or, unless the Backend is
// shared with the group, belongs to a user other than this one and root;
// or that its group (unless shared) or others can write to.
func (b *Backend) checkLockFile(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fileErr("stat lock file", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	mode := fi.Mode()
	uid := uint32(os.Getuid())
	switch {
	case !mode.IsRegular():
		return unsafeErr("lock file", f.Name(), "", st, mode, "not a regular file")
	case st.Nlink > 1:
		return unsafeErr("lock file", f.Name(), "", st, mode, fmt.Sprintf("it has %d names (hard links): it may be another file, linked here to be overwritten", st.Nlink))
	case !b.shared && st.Uid != 0 && st.Uid != uid:
		return unsafeErr("lock file", f.Name(), "", st, mode, "it belongs to another user, who could rewrite its token counter or remove it")
	case mode&0o002 != 0:
		return unsafeErr("lock file", f.Name(), "", st, mode, "every user can rewrite its token counter (chmod o-w)")
	case mode&0o020 != 0 && !b.shared:
		return unsafeErr("lock file", f.Name(), "", st, mode, fmt.Sprintf("members of group %d can rewrite its token counter (chmod g-w; a Backend shared with the group, WithFileMode(0o660), accepts it)", st.Gid))
	}
	return nil
}
