//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Lister  = (*Backend)(nil)
)

// Errors of this package, to compare with errors.Is.
var (
	// ErrCorruptCounter means the token counter of a key cannot be read
	// back. The key is refused rather than risk granting a token twice;
	// an operator who knows the last token handed out may remove the lock
	// file (the next token then comes from the wall clock: see the
	// package documentation).
	ErrCorruptCounter = errors.New("filelock: token counter is corrupt")
)

// DefaultPollInterval is the default of WithPollInterval.
const DefaultPollInterval = time.Second

// After a wake-up, a waiter tries again burstTries times over pauses of
// up to 1ms, 2ms, ... maxBurst (full jitter); see Backend.grab.
const (
	maxBurst   = 64 * time.Millisecond
	burstTries = 7
)

// ErrClosed is matched by the errors of a Backend used after Close; it
// matches distlock.ErrClosed.
var ErrClosed = driver.ClosedError("filelock")

// Backend is a lock service over one directory of lock files on the local
// host. Every Backend, in this or any other process, that uses the same
// directory takes part in the same locks. The zero value is not usable;
// call New. A Backend is safe for concurrent use. It holds open files only
// for held leases and for waiters, and Close ends the waiters.
type Backend struct {
	dir    string
	perm   fs.FileMode
	shared bool // perm lets the group write: the group is trusted (see checkPath)
	poll   time.Duration
	host   string
	w      watcher

	// queue holds the acquirers of each key (by file name) within the
	// Backend: only the one that has the turn touches the lock file, and
	// it keeps the turn while it holds the lease, which is the turn's
	// holder (for File).
	queue driver.Queue[*lease]

	permits permitSet // the live permits granted through the Backend, for File
	readers readerSet // the live shared grants made through the Backend, for File

	closing context.Context // ends at Close
	close   context.CancelFunc
}

// Option configures a Backend.
type Option func(*config)

type config struct {
	perm fs.FileMode
	poll time.Duration
}

// WithPollInterval sets the longest a waiter sleeps between two tries when
// no wake-up arrives. On Linux waiters are woken by inotify and this is only
// a safety net; elsewhere waiters poll with a backoff that grows up to it.
// Default: DefaultPollInterval (1s). It must be positive.
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.poll = d } }

// WithFileMode sets the permissions of the files a Backend creates, and of
// the directory if New creates it (with the matching search bits). Use
// 0o660 and a group-owned directory to share locks between users: a mode
// that lets the group write makes the Backend shared with the group, which
// then may write to the lock directory and the lock files (see Permissions
// in the package documentation). Default: 0o600. Only permission bits are
// allowed, 0o600 included, and not the write permission for others, which
// would let every user rewrite token counters.
func WithFileMode(perm fs.FileMode) Option { return func(c *config) { c.perm = perm } }

// New returns a Backend over the lock directory dir, creating it (and its
// parents) if needed. With dir "" it uses DefaultDir, creating it (but not
// /var/tmp) with mode 0700 if needed, and checks that it is a directory of
// the current user that others cannot enter, whatever WithFileMode says.
// Any lock directory is refused with an error matching ErrUnsafe when a
// user other than this one and root could remove or replace its lock
// files (see Permissions in the package documentation).
// The directory should be on a local file system that persists across
// reboots if tokens must keep increasing across reboots (see the package
// documentation). A bad option returns an error matching
// distlock.ErrInvalidOption.
func New(dir string, opts ...Option) (*Backend, error) {
	cfg := config{perm: 0o600, poll: DefaultPollInterval}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.poll <= 0:
		return nil, fmt.Errorf("%w: filelock: poll interval %v is not positive", driver.ErrInvalidOption, cfg.poll)
	case cfg.perm&^fs.ModePerm != 0 || cfg.perm&0o600 != 0o600:
		return nil, fmt.Errorf("%w: filelock: file mode %v must be permission bits including 0600", driver.ErrInvalidOption, cfg.perm)
	case cfg.perm&0o002 != 0:
		return nil, fmt.Errorf("%w: filelock: file mode %v lets every user rewrite token counters; share locks with a group (0660) instead", driver.ErrInvalidOption, cfg.perm)
	}
	shared := cfg.perm&0o020 != 0
	private := dir == ""
	if private {
		dir = DefaultDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("filelock: lock directory %q: %w", dir, err)
	}
	if private {
		// Only the last component is ours to create: the base is the system's.
		if fi, err := os.Stat(filepath.Dir(abs)); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("filelock: default lock directory %s: %s is not a directory; name a lock directory (file:///path)", abs, filepath.Dir(abs))
		}
		if err := makeDir(abs, 0o700); err != nil {
			return nil, err
		}
		if err := checkPrivate(abs); err != nil {
			return nil, err
		}
	} else if err := makeDir(abs, dirMode(cfg.perm)); err != nil {
		return nil, err
	}
	if err := checkPath(abs, shared); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	b := &Backend{dir: abs, perm: cfg.perm, shared: shared, poll: cfg.poll, host: host}
	b.closing, b.close = context.WithCancel(context.Background())
	return b, nil
}

// Close ends every waiting Acquire with an error matching ErrClosed, and
// makes later ones fail with it; the waiters close their files. Leases
// granted before keep their keys until they are released, or until the
// process ends, and can still be refreshed. Calling Close again does
// nothing.
func (b *Backend) Close() error {
	b.close()
	return nil
}

// dirMode adds search bits where perm has read bits.
func dirMode(perm fs.FileMode) fs.FileMode { return perm | (perm&0o444)>>2 }

// makeDir creates dir if needed, making new entries durable, and checks that
// it is a directory.
func makeDir(dir string, mode fs.FileMode) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := makeDir(filepath.Dir(dir), mode); err != nil && filepath.Dir(dir) != dir {
			return err
		}
		if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("filelock: create lock directory: %w", err)
		}
		if err := syncDir(filepath.Dir(dir)); err != nil {
			return err
		}
		fi, err = os.Stat(dir)
	}
	if err != nil {
		return fmt.Errorf("filelock: lock directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("filelock: lock directory %s: %w", dir, syscall.ENOTDIR)
	}
	return nil
}

// checkPrivate refuses a default directory that another user could have
// prepared (it lives in a shared place, /var/tmp).
func checkPrivate(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("filelock: lock directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("filelock: default lock directory %s is not a directory (a symbolic link?)", dir)
	case ok && int(st.Uid) != os.Getuid():
		return fmt.Errorf("filelock: default lock directory %s belongs to uid %d, not to this user (%d)", dir, st.Uid, os.Getuid())
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("filelock: default lock directory %s has mode %v; it must not be accessible to others (chmod 700)", dir, fi.Mode().Perm())
	}
	return nil
}

// Dir returns the absolute path of the lock directory.
func (b *Backend) Dir() string { return b.dir }

// KeyPath returns where a valid key's lock lives: the path of its lock
// file, which exists once the key has been acquired. Removing or replacing
// it while the key is held makes the holder lose the lock (its next
// Refresh fails) and leaves the key's next token to the wall clock: it is
// meant for inspection, not for unlocking.
func (b *Backend) KeyPath(key string) string {
	return filepath.Join(b.dir, fileName(key)+lockSuffix)
}

// Acquire implements driver.Backend. The key is granted when this Backend
// holds an exclusive flock on the key's lock file, which excludes its
// shared grants (AcquireShared) too; the new token is durable on disk
// before Acquire returns. Waiting is woken by inotify on Linux and polls
// elsewhere; a waiting Acquire keeps the key's later readers out. See the
// package documentation (Waiting). opts.Writer changes nothing: every
// lock of a key is its read/write lock's writer.
//
// opts.TTL is checked but has no effect on the grant, which lasts until
// Release or the end of the process (Validity.TTL is 0). opts.OnLost is
// never called.
func (b *Backend) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	if b.closing.Err() != nil {
		return nil, ErrClosed
	}
	wctx := ctx
	if opts.Wait {
		// Close ends the wait: the waiter's context ends with the Backend.
		var cancel context.CancelFunc
		wctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(b.closing, cancel)()
	}
	l, err := b.acquire(wctx, key, opts)
	switch {
	case err == nil:
		return l, nil
	case wctx.Err() == nil:
		return nil, err
	case ctx.Err() != nil:
		return nil, driver.Canceled(ctx)
	}
	return nil, ErrClosed
}

// acquire is Acquire of a checked key, while the Backend is open.
func (b *Backend) acquire(ctx context.Context, key string, opts driver.AcquireOptions) (*lease, error) {
	name := fileName(key)
	// While this asker waits, it holds the shared flock of the key's
	// writers file, which keeps the key's later readers out (see
	// markWriter); it is let go once the asker is granted or gives up.
	var mark *os.File
	defer func() {
		if mark != nil {
			unlockClose(mark)
		}
	}()
	turn, ok := b.queue.Try(name)
	switch {
	case ok:
	case !opts.Wait:
		return nil, fmt.Errorf("%w: %q is held (or awaited) through this Backend", driver.ErrNotAcquired, key)
	default:
		// Another asker of this Backend has the key's turn: this one
		// waits, as a writer, from now on.
		m, err := b.markWriter(ctx, name)
		if err != nil {
			return nil, err
		}
		mark = m
		if turn, err = b.queue.Wait(ctx, name); err != nil {
			return nil, driver.Canceled(ctx)
		}
	}
	l, err := b.grab(ctx, key, name, opts, &mark)
	if err != nil {
		turn.Done()
		return nil, err
	}
	l.turn = turn
	turn.Set(l)
	return l, nil
}

// Held is a grant to look up with File. *distlock.Lock satisfies it, as do
// the leases this Backend returns.
type Held interface {
	Key() string
	Token() uint64
}

// File returns a new descriptor of the lock file that holds lock, a grant
// of this Backend, on the same open file description as the grant's own.
// The flock of a grant belongs to that description: it stays held as long
// as any descriptor of it is open, in any process. Handing the descriptor
// to a child process (exec.Cmd.ExtraFiles) therefore keeps the key held
// until the child exits too, even if the holder dies first; the distlock
// command does that so that the key is not granted again before the command
// it supervises is gone.
//
// The caller owns the returned file and must close it; closing it does not
// release the key. Do not unlock it (flock LOCK_UN): that would unlock the
// description, and so the key, for the holder too. Releasing the lock
// unlocks the description whoever still has it open.
//
// For a permit (AcquirePermit), File returns a descriptor of the permit's
// slot file, whose flock is the permit in the same way.
//
// It returns an error matching distlock.ErrLockLost if lock is not held
// through this Backend (never granted by it, released, or found lost), and
// distlock.ErrInvalidOption if lock is nil. File is safe for concurrent use.
func (b *Backend) File(lock Held) (*os.File, error) {
	if isNil(lock) {
		return nil, fmt.Errorf("%w: filelock: nil lock", driver.ErrInvalidOption)
	}
	key, token := lock.Key(), lock.Token()
	l := b.queue.Holder(fileName(key))
	if l == nil || l.token != token {
		if p := b.permits.get(fileName(key), token); p != nil {
			return p.file()
		}
		if r := b.readers.get(fileName(key), token); r != nil {
			return r.file()
		}
		return nil, fmt.Errorf("%w: token %d of %q is not held through this Backend", driver.ErrLockLost, token, key)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil, fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", driver.ErrLockLost, token, key)
	}
	f, err := dupFile(l.f)
	if err != nil {
		return nil, fileErr("duplicate lock file descriptor", err)
	}
	return f, nil
}

var _ Held = (*distlock.Lock)(nil)

// isNil reports whether h is nil or a nil pointer of a type that holds a
// grant.
func isNil(h Held) bool {
	switch v := h.(type) {
	case nil:
		return true
	case *distlock.Lock:
		return v == nil
	case *lease:
		return v == nil
	case *permit:
		return v == nil
	case *readLease:
		return v == nil
	}
	return false
}

// openLock opens (creating if needed) the lock file at path, on its own
// open file description: flock locks belong to that description, so two
// opens exclude each other even within one process.
//
// The file is checked before anything is written to it: in a directory
// where others may create entries (a sticky one, such as /tmp), the name
// may be another user's file, or a hard link to some file of ours.
func (b *Backend) openLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, b.perm)
	if err != nil {
		return nil, fileErr("open lock file", err)
	}
	if err := b.checkLockFile(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// fileSorter sorts file system errors (see driver.Sorter): errors that may
// pass (no memory, no file descriptors, I/O errors, a full disk) match
// distlock.ErrUnavailable.
var fileSorter = driver.Sorter{Pkg: "filelock", Permanent: func(err error) bool {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EACCES, syscall.EPERM, syscall.EROFS, syscall.ENOTDIR, syscall.ELOOP,
			syscall.ENOENT, syscall.EISDIR, syscall.ENAMETOOLONG, syscall.EINVAL:
			return true
		}
	}
	return false
}}

// fileErr wraps a file system error of what, sorted by fileSorter.
func fileErr(what string, err error) error { return fileSorter.Sort(nil, nil, what, err) }

// grab takes the flock of key's lock file, then its next token.
//
// Waiting: a blocking flock cannot be cancelled, and a goroutine blocked
// in it (with the lock it might get later) would outlive the caller's
// context. So the waiter keeps its file open and, in driver.Wait, tries
// LOCK_EX|LOCK_NB each time inotify reports that the file was closed (a
// holder releasing or exiting closes it) or renamed or removed. The
// kernel reports a close just before it drops the closed file's lock, so
// a try that fails right after a wake-up is repeated burstTries times over
// short, growing, jittered pauses (up to maxBurst) before the waiter
// sleeps again; the jitter spreads the waiting Backends of other processes
// that woke together. A slow poll covers wake-ups that never come (an
// inotify queue overflow, or no inotify at all).
//
// A waiting asker marks itself as a writer (markWriter, into *mark, which
// the caller lets go) after its first failed try, so that the key's later
// readers wait for it.
func (b *Backend) grab(ctx context.Context, key, name string, opts driver.AcquireOptions, mark **os.File) (*lease, error) {
	path := filepath.Join(b.dir, name+lockSuffix)
	f, err := b.openLock(path)
	if err != nil {
		return nil, err
	}
	var sub *subscription
	defer func() { sub.close() }()
	closeFile := func() {
		if f != nil {
			f.Close()
			f = nil
		}
	}
	// reopen opens the file that path names now, in place of f, which was
	// removed or replaced: its lock guards nothing, and sub watched it.
	reopen := func() error {
		closeFile()
		sub.close()
		sub = nil
		var err error
		f, err = b.openLock(path)
		return err
	}
	// try takes the flock of the file at path without waiting, and
	// reports whether it did.
	try := func() (bool, error) {
		for {
			ok, err := flock(f, flockEX|flockNB)
			if err != nil {
				return false, fileErr("lock", err)
			}
			if !ok {
				return false, nil
			}
			same, err := sameFile(f, path)
			switch {
			case err != nil:
				return false, err
			case same:
				return true, nil
			}
			// Removed or replaced after we opened it: start over on the
			// current file.
			if err := reopen(); err != nil {
				return false, err
			}
		}
	}
	if !opts.Wait {
		ok, err := try()
		if err == nil && !ok {
			err = fmt.Errorf("%w: %q is held", driver.ErrNotAcquired, key)
		}
		if err != nil {
			closeFile()
			return nil, err
		}
	} else {
		quick := driver.ExponentialBackoff(time.Millisecond, maxBurst) // after a wake-up
		slow := driver.ExponentialBackoff(time.Millisecond, b.poll)    // with no wake-ups to wait for
		// Failed tries since the last wake-up (0: none since), and without
		// wake-ups; whether there was a try before this one.
		burst, polls, tried := 0, 0, false
		w := driver.Waiter[struct{}]{
			Try: func(_ context.Context, woke bool) (struct{}, *driver.Held, error) {
				if tried {
					if same, err := sameFile(f, path); err == nil && !same {
						// Removed or replaced while we waited: wait on the
						// current file.
						if err := reopen(); err != nil {
							return struct{}{}, nil, err
						}
					}
				}
				tried = true
				if ok, err := try(); err != nil || ok {
					return struct{}{}, nil, err
				}
				if *mark == nil {
					m, err := b.tryMarkWriter(name)
					if err != nil {
						return struct{}{}, nil, err
					}
					if *mark = m; m == nil {
						// A reader's probe has the writers file for a
						// moment: mark again soon.
						return struct{}{}, &driver.Held{RetryIn: markRetry}, nil
					}
				}
				if woke {
					burst = 1
				}
				var delay time.Duration
				switch {
				case sub == nil:
					// Nothing watches the file: driver.Wait subscribes
					// (Subscribe), or if that was just tried and failed,
					// the waiter polls, backing off up to the poll
					// interval.
					polls++
					delay, _ = slow.Backoff(polls)
					return struct{}{}, &driver.Held{RetryIn: min(delay, b.poll)}, nil
				case burst > 0 && burst <= burstTries:
					delay, _ = quick.Backoff(burst)
					burst++
				default:
					burst, delay = 0, b.poll // back to waiting for wake-ups
				}
				return struct{}{}, &driver.Held{Wake: sub.C, RetryIn: min(delay, b.poll)}, nil
			},
			Leave: closeFile,
		}
		if canWatch {
			w.Subscribe = func(context.Context) (<-chan struct{}, error) {
				// The watch is in effect once added: there is no
				// confirmation to wait for. When it cannot be added, the
				// waiter polls, and subscribes again after its next try.
				sub = b.w.subscribe(path)
				return nil, nil
			}
		}
		if _, err := driver.Wait(ctx, w); err != nil {
			return nil, err
		}
	}
	// A dead holder's description goes first: until ours is written,
	// readers of the holder see a grant in progress, not the dead one.
	os.Remove(filepath.Join(b.dir, name+infoSuffix))
	token, err := nextToken(f, key, b.dir)
	if err != nil {
		unlockClose(f)
		return nil, err
	}
	now := time.Now()
	l := &lease{b: b, key: key, name: name, path: path, f: f, token: token, since: now,
		validity: driver.Validity{Sent: now, TTL: 0}}
	// The holder description is informational: a failure to write it does
	// not make the grant less valid.
	_ = b.writeInfo(name, info{Key: key, Token: infoToken(token), Owner: opts.Owner, PID: os.Getpid(), Host: b.host, Since: now})
	return l, nil
}

// sameFile reports whether path still names the file f.
func sameFile(f *os.File, path string) (bool, error) {
	_, same, err := statSame(f, path)
	return same, err
}

// statSame returns the status of f and whether path still names it.
func statSame(f *os.File, path string) (fs.FileInfo, bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fileErr("stat lock file", err)
	}
	pi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fi, false, nil
	}
	if err != nil {
		return nil, false, fileErr("stat lock file", err)
	}
	return fi, os.SameFile(fi, pi), nil
}

func unlockClose(f *os.File) {
	flock(f, flockUN)
	f.Close()
}

// lease is a held flock on a key's lock file.
type lease struct {
	b        *Backend
	key      string
	name     string
	path     string
	token    uint64
	since    time.Time
	validity driver.Validity
	turn     *driver.Turn[*lease] // the key's turn, kept while held

	mu sync.Mutex
	f  *os.File // nil once released or found lost
}

func (l *lease) Token() uint64             { return l.token }
func (l *lease) Validity() driver.Validity { return l.validity }

// Key returns the key the lease was acquired for.
func (l *lease) Key() string { return l.key }

// Refresh checks that the lease still holds the key: it was not released
// and its lock file was not removed or replaced. The grant has no time
// bound, so the result has TTL 0.
//
// Refresh also keeps the lock file from age-based cleaners of temporary
// directories (systemd-tmpfiles, tmpreaper): when the file was last
// modified more than touchAfter ago, Refresh sets its times to now
// (futimens), and those of the holder description. It does not do so on
// every call because a change of times wakes the key's waiters (inotify
// reports it with removals).
func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	sent := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return driver.Validity{}, fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", driver.ErrLockLost, l.token, l.key)
	}
	fi, err := l.checkLocked()
	if err != nil {
		if errors.Is(err, driver.ErrLockLost) {
			l.dropLocked()
		}
		return driver.Validity{}, err
	}
	if time.Since(fi.ModTime()) > touchAfter {
		// Best effort: a file that cannot be touched is still held. The
		// description is touched through a descriptor of a regular file,
		// never through a link put in its place.
		_ = touch(l.f)
		if f, err := openRegular(filepath.Join(l.b.dir, l.name+infoSuffix)); err == nil && f != nil {
			_ = touch(f)
			f.Close()
		}
	}
	return driver.Validity{Sent: sent}, nil
}

// touchAfter is the age of a held lock file's modification time beyond
// which Lease.Refresh sets its times to now. Cleaners of temporary
// directories count in days.
const touchAfter = time.Hour

// checkLocked returns the status of the lock file, or an error matching
// ErrLockLost when the lock file was removed or replaced.
func (l *lease) checkLocked() (fs.FileInfo, error) {
	fi, same, err := statSame(l.f, l.path)
	if err != nil {
		return nil, err
	}
	if !same {
		return nil, fmt.Errorf("%w: the lock file of %q was removed or replaced while token %d held it", driver.ErrLockLost, l.key, l.token)
	}
	return fi, nil
}

// dropLocked gives up the file and the key's turn.
func (l *lease) dropLocked() {
	unlockClose(l.f)
	l.f = nil
	l.turn.Done()
}

// Release gives the key up: it removes the holder description, unlocks and
// closes the lock file. It does not block, so ctx is not needed to bound it.
func (l *lease) Release(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", driver.ErrLockLost, l.token, l.key)
	}
	_, err := l.checkLocked()
	if err == nil {
		// Still ours: no one else can be writing it.
		os.Remove(filepath.Join(l.b.dir, l.name+infoSuffix))
	}
	l.dropLocked()
	if err != nil && !errors.Is(err, driver.ErrLockLost) {
		// The check failed without showing a loss; the lock was released.
		return nil
	}
	return err
}
