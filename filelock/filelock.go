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
)

var (
	_ distlock.Backend = (*Backend)(nil)
	_ distlock.Lister  = (*Backend)(nil)
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

// maxBurst bounds the quick retries after a wake-up; see Backend.grab.
const maxBurst = 64 * time.Millisecond

// Backend is a lock service over one directory of lock files on the local
// host. Every Backend, in this or any other process, that uses the same
// directory takes part in the same locks. The zero value is not usable;
// call New. A Backend is safe for concurrent use and needs no closing: it
// holds open files only for held leases and for waiters.
type Backend struct {
	dir  string
	perm fs.FileMode
	poll time.Duration
	host string
	w    watcher

	mu    sync.Mutex
	gates map[string]*gate // by file name
}

// gate queues the acquirers of one key within a Backend: only the one that
// holds it touches the lock file, and it keeps it while it holds the lease.
type gate struct {
	ch   chan struct{} // capacity 1: full while taken
	refs int
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
// 0o660 and a group-owned directory to share locks between users.
// Default: 0o600. Only permission bits are allowed.
func WithFileMode(perm fs.FileMode) Option { return func(c *config) { c.perm = perm } }

// New returns a Backend over the lock directory dir, creating it (and its
// parents) if needed. With dir "" it uses DefaultDir, creating it (but not
// /var/tmp) with mode 0700 if needed, and checks that it is a directory of
// the current user that others cannot enter, whatever WithFileMode says.
// The directory should be on a local file system that persists across
// reboots if tokens must keep increasing across reboots (see the package
// documentation).
func New(dir string, opts ...Option) (*Backend, error) {
	cfg := config{perm: 0o600, poll: DefaultPollInterval}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.poll <= 0:
		return nil, fmt.Errorf("%w: filelock: poll interval %v is not positive", distlock.ErrInvalidOption, cfg.poll)
	case cfg.perm&^fs.ModePerm != 0 || cfg.perm&0o600 != 0o600:
		return nil, fmt.Errorf("%w: filelock: file mode %v must be permission bits including 0600", distlock.ErrInvalidOption, cfg.perm)
	}
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
	host, _ := os.Hostname()
	return &Backend{dir: abs, perm: cfg.perm, poll: cfg.poll, host: host, gates: map[string]*gate{}}, nil
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

// Path returns the path of the lock file of a valid key, which exists once
// the key has been acquired. Removing or replacing it while the key is held
// makes the holder lose the lock (its next Refresh fails) and leaves the
// key's next token to the wall clock: it is meant for inspection, not for
// unlocking.
func (b *Backend) Path(key string) string {
	return filepath.Join(b.dir, fileName(key)+lockSuffix)
}

// Acquire implements distlock.Backend. The key is granted when this Backend
// holds an exclusive flock on the key's lock file; the new token is durable
// on disk before Acquire returns. Waiting is woken by inotify on Linux and
// polls elsewhere; see the package documentation.
//
// opts.TTL is checked but has no effect on the grant, which lasts until
// Release or the end of the process (Validity.TTL is 0). opts.OnLost is
// never called.
func (b *Backend) Acquire(ctx context.Context, key string, opts distlock.AcquireOptions) (distlock.Lease, error) {
	if err := distlock.ValidateKey(key); err != nil {
		return nil, err
	}
	if opts.TTL <= 0 || opts.TTL > distlock.MaxTTL {
		return nil, fmt.Errorf("%w: TTL %v is not in (0, %v]", distlock.ErrInvalidOption, opts.TTL, distlock.MaxTTL)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	name := fileName(key)
	g := b.enter(name)
	if opts.Wait {
		select {
		case g.ch <- struct{}{}:
		case <-ctx.Done():
			b.leave(name, g)
			return nil, ctx.Err()
		}
	} else {
		select {
		case g.ch <- struct{}{}:
		default:
			b.leave(name, g)
			return nil, fmt.Errorf("%w: %q is held (or awaited) through this Backend", distlock.ErrNotAcquired, key)
		}
	}
	l, err := b.grab(ctx, key, name, opts)
	if err != nil {
		<-g.ch
		b.leave(name, g)
		return nil, err
	}
	l.g = g
	return l, nil
}

func (b *Backend) enter(name string) *gate {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.gates[name]
	if g == nil {
		g = &gate{ch: make(chan struct{}, 1)}
		b.gates[name] = g
	}
	g.refs++
	return g
}

func (b *Backend) leave(name string, g *gate) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g.refs--; g.refs == 0 {
		delete(b.gates, name)
	}
}

// openLock opens (creating if needed) the lock file at path, on its own
// open file description: flock locks belong to that description, so two
// opens exclude each other even within one process.
func (b *Backend) openLock(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, b.perm)
	if err != nil {
		return nil, fileErr("open lock file", err)
	}
	return f, nil
}

// fileErr wraps a file system error; errors that may pass (no memory, no
// file descriptors, I/O errors, a full disk) match distlock.ErrUnavailable.
func fileErr(what string, err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EACCES, syscall.EPERM, syscall.EROFS, syscall.ENOTDIR, syscall.ELOOP,
			syscall.ENOENT, syscall.EISDIR, syscall.ENAMETOOLONG, syscall.EINVAL:
			return fmt.Errorf("filelock: %s: %w", what, err)
		}
	}
	return fmt.Errorf("%w: filelock: %s: %w", distlock.ErrUnavailable, what, err)
}

// grab takes the flock of key's lock file, then its next token.
//
// Waiting: the waiter keeps its file open and tries LOCK_EX|LOCK_NB each
// time inotify reports that the file was closed (a holder releasing or
// exiting closes it) or renamed or removed. The kernel reports a close just
// before it drops the closed file's lock, so a try that fails right after a
// wake-up is repeated a few times over a short, growing delay (up to
// maxBurst) before the waiter sleeps again. A slow poll covers wake-ups that
// never come (an inotify queue overflow, or no inotify at all).
func (b *Backend) grab(ctx context.Context, key, name string, opts distlock.AcquireOptions) (*lease, error) {
	path := filepath.Join(b.dir, name+lockSuffix)
	f, err := b.openLock(path)
	if err != nil {
		return nil, err
	}
	var sub *subscription
	defer func() { sub.close() }()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	burst := time.Duration(0) // next quick retry after a wake-up; 0: none
	for {
		ok, err := flock(f, flockEX|flockNB)
		if err != nil {
			f.Close()
			return nil, fileErr("lock", err)
		}
		if ok {
			if same, err := sameFile(f, path); err != nil || !same {
				// The file was removed or replaced after we opened it:
				// this lock guards nothing. Start over on the current file.
				f.Close()
				if err != nil {
					return nil, err
				}
				if f, err = b.openLock(path); err != nil {
					return nil, err
				}
				sub.close()
				sub = nil
				continue
			}
			break
		}
		if !opts.Wait {
			f.Close()
			return nil, fmt.Errorf("%w: %q is held", distlock.ErrNotAcquired, key)
		}
		if sub == nil {
			if sub = b.w.subscribe(path); sub != nil {
				// Try once more: a release between the try and the watch
				// sent no event.
				continue
			}
		}
		var delay time.Duration
		switch {
		case burst > 0:
			delay, burst = burst, 2*burst
			switch {
			case sub == nil:
				burst = min(burst, b.poll)
			case burst > maxBurst:
				burst = 0 // back to waiting for wake-ups
			}
		case sub == nil:
			// No wake-ups to wait for: poll, backing off up to the poll interval.
			delay, burst = time.Millisecond, 2*time.Millisecond
		default:
			delay = b.poll
		}
		delay = min(delay, b.poll)
		if timer == nil {
			timer = time.NewTimer(delay)
		} else {
			timer.Reset(delay)
		}
		var woke <-chan struct{}
		if sub != nil {
			woke = sub.C
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-woke:
			burst = time.Millisecond
		case <-timer.C:
		}
		if same, err := sameFile(f, path); err == nil && !same {
			// Removed or replaced while we waited: wait on the current file.
			f.Close()
			if f, err = b.openLock(path); err != nil {
				return nil, err
			}
			sub.close()
			sub = nil
		}
	}

	token, err := nextToken(f, key, b.dir)
	if err != nil {
		unlockClose(f)
		return nil, err
	}
	now := time.Now()
	l := &lease{b: b, key: key, name: name, path: path, f: f, token: token, since: now,
		validity: distlock.Validity{Sent: now, TTL: 0}}
	// The holder description is informational: a failure to write it does
	// not make the grant less valid.
	_ = b.writeInfo(name, info{Key: key, Token: token, Owner: opts.Owner, PID: os.Getpid(), Host: b.host, Since: now})
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
	validity distlock.Validity
	g        *gate

	mu sync.Mutex
	f  *os.File // nil once released or found lost
}

func (l *lease) Token() uint64               { return l.token }
func (l *lease) Validity() distlock.Validity { return l.validity }

// Refresh checks that the lease still holds the key: it was not released
// and its lock file was not removed or replaced. The grant has no time
// bound, so the result has TTL 0.
//
// Refresh also keeps the lock file from age-based cleaners of temporary
// directories (systemd-tmpfiles, tmpreaper): when the file was last
// modified more than TouchAfter ago, Refresh sets its times to now
// (futimens), and those of the holder description. It does not do so on
// every call because a change of times wakes the key's waiters (inotify
// reports it with removals).
func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (distlock.Validity, error) {
	if ttl <= 0 || ttl > distlock.MaxTTL {
		return distlock.Validity{}, fmt.Errorf("%w: TTL %v is not in (0, %v]", distlock.ErrInvalidOption, ttl, distlock.MaxTTL)
	}
	if err := ctx.Err(); err != nil {
		return distlock.Validity{}, fmt.Errorf("%w: %w", distlock.ErrUnavailable, err)
	}
	sent := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return distlock.Validity{}, fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", distlock.ErrLockLost, l.token, l.key)
	}
	fi, err := l.checkLocked()
	if err != nil {
		if errors.Is(err, distlock.ErrLockLost) {
			l.dropLocked()
		}
		return distlock.Validity{}, err
	}
	if now := time.Now(); now.Sub(fi.ModTime()) > TouchAfter {
		// Best effort: a file that cannot be touched is still held.
		_ = touch(l.f)
		_ = os.Chtimes(filepath.Join(l.b.dir, l.name+infoSuffix), now, now)
	}
	return distlock.Validity{Sent: sent}, nil
}

// TouchAfter is the age of a held lock file's modification time beyond
// which Lease.Refresh sets its times to now. Cleaners of temporary
// directories count in days.
const TouchAfter = time.Hour

// checkLocked returns the status of the lock file, or an error matching
// ErrLockLost when the lock file was removed or replaced.
func (l *lease) checkLocked() (fs.FileInfo, error) {
	fi, same, err := statSame(l.f, l.path)
	if err != nil {
		return nil, err
	}
	if !same {
		return nil, fmt.Errorf("%w: the lock file of %q was removed or replaced while token %d held it", distlock.ErrLockLost, l.key, l.token)
	}
	return fi, nil
}

// dropLocked gives up the file and the gate.
func (l *lease) dropLocked() {
	unlockClose(l.f)
	l.f = nil
	<-l.g.ch
	l.b.leave(l.name, l.g)
}

// Release gives the key up: it removes the holder description, unlocks and
// closes the lock file. It does not block, so ctx is not needed to bound it.
func (l *lease) Release(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", distlock.ErrLockLost, l.token, l.key)
	}
	_, err := l.checkLocked()
	if err == nil {
		// Still ours: no one else can be writing it.
		os.Remove(filepath.Join(l.b.dir, l.name+infoSuffix))
	}
	l.dropLocked()
	if err != nil && !errors.Is(err, distlock.ErrLockLost) {
		// The check failed without showing a loss; the lock was released.
		return nil
	}
	return err
}

// LeaseFile returns a new descriptor of the lock file of a lease granted
// by a Backend of this package, on the same open file description as the
// lease's own. The flock of a grant belongs to that description: it stays
// held as long as any descriptor of it is open, in any process. Handing
// the descriptor to a child process (exec.Cmd.ExtraFiles) therefore keeps
// the key held until the child exits too, even if the holder dies first;
// the distlock command does that so that the key is not granted again
// before the command it supervises is gone.
//
// The caller owns the returned file and must close it; closing it does not
// release the key. Do not unlock it (flock LOCK_UN): that would unlock the
// description, and so the key, for the holder too. Lease.Release unlocks
// the description whoever still has it open.
//
// It returns an error matching distlock.ErrLockLost if the lease is
// released or was found lost, and distlock.ErrInvalidOption if l is not a
// lease of this package.
func LeaseFile(l distlock.Lease) (*os.File, error) {
	fl, ok := l.(*lease)
	if !ok {
		return nil, fmt.Errorf("%w: filelock: %T is not a filelock lease", distlock.ErrInvalidOption, l)
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.f == nil {
		return nil, fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", distlock.ErrLockLost, fl.token, fl.key)
	}
	f, err := dupFile(fl.f)
	if err != nil {
		return nil, fileErr("duplicate lock file descriptor", err)
	}
	return f, nil
}
