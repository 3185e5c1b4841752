//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

// Shared (read) locks (driver.SharedLocks).
//
// The files of a key whose name is N, besides N.lock and N.info:
//
//	N.lock          a shared grant is a shared flock of it, the exclusive
//	                lock's an exclusive one: the kernel keeps them apart,
//	                and flock(1) -s shares with the readers
//	N.reader.<t>    the description of the shared grant of token t, held
//	                with an exclusive flock by that grant: live while
//	                locked, a dead reader's once not
//	N.writers       held with a shared flock by every exclusive asker of
//	                the key that waits: while it is locked, readers wait
//	                (a reader probes it with a try of its exclusive flock,
//	                given back at once)
//	N.sem           its exclusive flock orders the token draws made under
//	                a shared flock of N.lock (readers' and permits'); a
//	                reader holds it from its probe of N.writers to its
//	                draw, so that readers' probes never meet: a probe is
//	                refused by waiting writers only
//
// Whoever reads the descriptions (Readers, List) removes dead readers'.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.SharedLocks = (*Backend)(nil)
	_ driver.Lease       = (*readLease)(nil)
)

// File name parts of shared locks (see name.go's for a key's lock).
const (
	writersSuffix = ".writers"
	readerInfix   = ".reader."
	readerTmp     = ".tmp" // after a reader's description, while it is written
)

// markRetry is how soon a waiting writer tries again to mark itself
// when a reader's probe had the writers file (for microseconds).
const markRetry = time.Millisecond

func readerName(name string, token uint64) string {
	return name + readerInfix + strconv.FormatUint(token, 10)
}

// readerOf parses the name of a reader's description: the key's name and
// the token.
func readerOf(entry string) (name string, token uint64, ok bool) {
	i := strings.LastIndex(entry, readerInfix)
	if i < 0 || !isDecimal(entry[i+len(readerInfix):]) {
		return "", 0, false
	}
	token, err := strconv.ParseUint(entry[i+len(readerInfix):], 10, 64)
	return entry[:i], token, err == nil
}

// AcquireShared implements driver.SharedLocks. A shared grant is a shared
// flock of the key's lock file, the file whose exclusive flock is the
// key's lock: it shares the key with the other shared grants, from this
// process or another (util-linux `flock -s` on the lock file included),
// and excludes the exclusive ones (`flock` on the lock file included).
// Its token is drawn from the key's counter, as a lock's, and its holder
// is described in a file of its own, for Readers and List. Like a lock it
// has no time bound (Validity.TTL is 0) and comes back when released or
// when its process ends. A reader is not granted while an exclusive asker
// of the key, of any process that uses this package, waits: see the
// package documentation (Waiting) for the order of askers.
func (b *Backend) AcquireShared(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	if b.closing.Err() != nil {
		return nil, ErrClosed
	}
	wctx := ctx
	if opts.Wait {
		var cancel context.CancelFunc
		wctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(b.closing, cancel)()
	}
	r, err := b.acquireShared(wctx, key, opts)
	switch {
	case err == nil:
		return r, nil
	case wctx.Err() == nil:
		return nil, err
	case ctx.Err() != nil:
		return nil, driver.Canceled(ctx)
	}
	return nil, ErrClosed
}

// acquireShared is AcquireShared of a checked key, while the Backend is
// open. It waits as grab does (see there), woken when the lock file is
// closed and when the writers file is let go (a writer granted, or one
// that gave up).
func (b *Backend) acquireShared(ctx context.Context, key string, opts driver.AcquireOptions) (*readLease, error) {
	name := fileName(key)
	path := filepath.Join(b.dir, name+lockSuffix)
	f, err := b.openLock(path)
	if err != nil {
		return nil, err
	}
	closeFile := func() {
		if f != nil {
			f.Close()
			f = nil
		}
	}
	var subs [2]*subscription
	closeSubs := func() {
		subs[0].close()
		subs[1].close()
		subs = [2]*subscription{}
	}
	defer closeSubs()
	// draws is the exclusive flock of the key's semaphore file, from a try
	// that took the shared flock until grantShared has drawn the token.
	var draws *os.File
	defer func() {
		if draws != nil {
			unlockClose(draws)
		}
	}()
	// try takes the shared flock when no writer waits, and reports why it
	// did not. It looks for waiting writers under the semaphore file's
	// exclusive flock, which it keeps (in draws) when it takes the key.
	try := func() (string, error) {
		sf, err := b.lockDraws(ctx, name)
		if err != nil {
			return "", err
		}
		defer func() {
			if sf != nil {
				unlockClose(sf)
			}
		}()
		for {
			if waits, err := b.writerWaits(name); err != nil || waits {
				return "a writer waits for it", err
			}
			ok, err := flock(f, flockSH|flockNB)
			if err != nil {
				return "", fileErr("lock", err)
			}
			if !ok {
				return "a writer holds it", nil
			}
			same, err := sameFile(f, path)
			switch {
			case err != nil:
				unlockClose(f)
				f = nil
				return "", err
			case same:
				draws, sf = sf, nil
				return "", nil
			}
			// Removed or replaced after we opened it: start over on the
			// current file.
			unlockClose(f)
			f = nil
			closeSubs()
			if f, err = b.openLock(path); err != nil {
				return "", err
			}
		}
	}
	if !opts.Wait {
		why, err := try()
		if err == nil && why != "" {
			err = fmt.Errorf("%w: %q: %s", driver.ErrNotAcquired, key, why)
		}
		if err != nil {
			closeFile()
			return nil, err
		}
	} else {
		quick := driver.ExponentialBackoff(time.Millisecond, maxBurst)
		slow := driver.ExponentialBackoff(time.Millisecond, b.poll)
		burst, polls := 0, 0
		w := driver.Waiter[struct{}]{
			Try: func(_ context.Context, woke bool) (struct{}, *driver.Held, error) {
				if f != nil {
					if same, err := sameFile(f, path); err == nil && !same {
						closeFile()
						closeSubs()
					}
				}
				if f == nil {
					var err error
					if f, err = b.openLock(path); err != nil {
						return struct{}{}, nil, err
					}
				}
				if why, err := try(); err != nil || why == "" {
					return struct{}{}, nil, err
				}
				if woke {
					burst = 1
				}
				var delay time.Duration
				switch {
				case subs[0] == nil:
					polls++
					delay, _ = slow.Backoff(polls)
					return struct{}{}, &driver.Held{RetryIn: min(delay, b.poll)}, nil
				case burst > 0 && burst <= burstTries:
					delay, _ = quick.Backoff(burst)
					burst++
				default:
					burst, delay = 0, b.poll
				}
				return struct{}{}, &driver.Held{Wake: subs[0].C, RetryIn: min(delay, b.poll)}, nil
			},
			Leave: closeFile,
		}
		if canWatch {
			w.Subscribe = func(context.Context) (<-chan struct{}, error) {
				// The lock file's closes (a release, a death) and the
				// writers file's (a writer that stops waiting, granted or
				// not), through one channel. A writers file that cannot
				// be watched is covered by the poll.
				if subs[0] = b.w.subscribe(path); subs[0] != nil {
					subs[1] = b.w.subscribeDirTo(subs[0].C, b.dir, name+writersSuffix)
				}
				return nil, nil
			}
		}
		if _, err := driver.Wait(ctx, w); err != nil {
			return nil, err
		}
	}
	sf := draws
	draws = nil
	r, err := b.grantShared(key, name, path, f, sf, opts)
	if err != nil {
		unlockClose(f)
		return nil, err
	}
	b.readers.add(r)
	return r, nil
}

// grantShared completes a shared grant of key, whose lock file f it holds
// with a shared flock: it draws the token under the exclusive flock of the
// key's semaphore file, sf, which it lets go (the other draws under a
// shared flock of the lock file, readers' and permits', take it too; a
// lock's draw holds the lock file's exclusive flock, which excludes them
// all), and writes the reader's description.
func (b *Backend) grantShared(key, name, path string, f, sf *os.File, opts driver.AcquireOptions) (*readLease, error) {
	token, err := nextToken(f, key, b.dir)
	unlockClose(sf)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	in := info{Key: key, Token: infoToken(token), Owner: opts.Owner, PID: os.Getpid(), Host: b.host, Since: now}
	descPath := filepath.Join(b.dir, readerName(name, token))
	desc, err := b.writeReader(descPath, in)
	if err != nil {
		return nil, fileErr("write reader description", err)
	}
	return &readLease{b: b, key: key, name: name, path: path, descPath: descPath, token: token, since: now,
		validity: driver.Validity{Sent: now, TTL: 0}, f: f, desc: desc}, nil
}

// writeReader writes a reader's description at path, through a file
// created afresh and locked before it is renamed into place: a
// description is never seen unlocked while its reader lives. It returns
// the file, whose exclusive flock the reader keeps.
func (b *Backend) writeReader(path string, in info) (*os.File, error) {
	data, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	tmp := path + readerTmp
	os.Remove(tmp) // left by a reader that died while writing it
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, b.perm)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		unlockClose(f)
		os.Remove(tmp)
		return nil, err
	}
	// Nobody else opens the temporary file: its flock is free.
	if ok, err := flock(f, flockEX|flockNB); err != nil || !ok {
		if err == nil {
			err = errors.New("locked by another")
		}
		return fail(err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	return f, nil
}

// tryMarkWriter marks an exclusive asker of name as waiting: it takes a
// shared flock of the key's writers file, without waiting, and returns
// the file. It returns no file, and no error, while a reader's probe
// (writerWaits) has the file's exclusive flock, for a moment. Writers
// take that file's shared flock only, here: its exclusive flock is a
// reader's probe.
func (b *Backend) tryMarkWriter(name string) (*os.File, error) {
	path := filepath.Join(b.dir, name+writersSuffix)
	for {
		// Open for writing: closing it then wakes the waiting readers (a
		// directory watch sees closes of files open for writing).
		f, err := b.openLock(path)
		if err != nil {
			return nil, err
		}
		ok, err := flock(f, flockSH|flockNB)
		switch {
		case err != nil:
			f.Close()
			return nil, fileErr("lock writers file", err)
		case !ok:
			f.Close()
			return nil, nil
		}
		same, err := sameFile(f, path)
		switch {
		case err != nil:
			unlockClose(f)
			return nil, err
		case same:
			return f, nil
		}
		unlockClose(f) // removed after we opened it: the current file
	}
}

// markWriter is tryMarkWriter, trying again over short pauses until it
// marks the asker or ctx ends.
func (b *Backend) markWriter(ctx context.Context, name string) (*os.File, error) {
	pause := driver.ExponentialBackoff(100*time.Microsecond, 20*time.Millisecond)
	for tries := 1; ; tries++ {
		f, err := b.tryMarkWriter(name)
		if err != nil || f != nil {
			return f, err
		}
		d, _ := pause.Backoff(tries)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, driver.Canceled(ctx)
		}
	}
}

// writerWaits reports whether an exclusive asker of name waits: whether
// its writers file is locked, which a try of its exclusive flock tells
// (given back at once). The caller holds the exclusive flock of the key's
// semaphore file (lockDraws), as every reader's probe does: no other
// probe has the writers file meanwhile, so only the shared flocks of
// waiting writers refuse the try. The file is opened for reading only:
// closing it wakes nobody.
func (b *Backend) writerWaits(name string) (bool, error) {
	f, err := openRegular(filepath.Join(b.dir, name+writersSuffix))
	if err != nil {
		return false, fileErr("probe writers file", err)
	}
	if f == nil {
		return false, nil
	}
	defer f.Close()
	free, err := flock(f, flockEX|flockNB)
	if err != nil {
		return false, fileErr("probe writers file", err)
	}
	if free {
		flock(f, flockUN)
	}
	return !free, nil
}

// lockDraws takes the exclusive flock of the key's semaphore file, which
// orders readers' probes of the writers file and the token draws made
// under a shared flock of the lock file, and returns the file. Its holders
// keep it for short reads and writes only, so it waits for it with a
// blocking flock (in a goroutine, so that ctx ends the wait: an abandoned
// flock is let go as soon as it is taken), after one try without
// blocking, rather than over pauses that would let a stream of other
// holders pass it by.
func (b *Backend) lockDraws(ctx context.Context, name string) (*os.File, error) {
	path := filepath.Join(b.dir, name+semSuffix)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Read only: closing it then wakes no waiter (see semWatch.match).
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, b.perm)
		if err != nil {
			return nil, fileErr("open semaphore file", err)
		}
		if err := b.checkLockFile(f); err != nil {
			f.Close()
			return nil, err
		}
		ok, err := flock(f, flockEX|flockNB)
		if err == nil && !ok {
			if err := flockWait(ctx, f, flockEX); err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				return nil, fileErr("lock semaphore file", err)
			}
		}
		if err != nil {
			f.Close()
			return nil, fileErr("lock semaphore file", err)
		}
		same, err := sameFile(f, path)
		if err != nil {
			unlockClose(f)
			return nil, err
		}
		if same {
			return f, nil
		}
		unlockClose(f) // removed after we opened it: the current file
	}
}

// flockWait applies how (a blocking flock) to f, in a goroutine, until it
// is granted (nil) or ctx ends (ctx's error). On an error f is closed, or
// when ctx ended first, left to the goroutine, which unlocks and closes
// it once its flock returns: the caller must not use f then.
func flockWait(ctx context.Context, f *os.File, how int) error {
	got := make(chan error)
	abandoned := make(chan struct{})
	go func() {
		_, err := flock(f, how)
		select {
		case got <- err:
		case <-abandoned:
			if err == nil {
				flock(f, flockUN)
			}
			f.Close()
		}
	}()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
		}
		return err
	case <-ctx.Done():
		close(abandoned)
		return ctx.Err()
	}
}

// Readers implements driver.SharedLocks: the live shared grants of key,
// by token, read from their descriptions (a description whose flock is
// no longer held is a dead reader's: it is removed, and not reported).
// A `flock -s` of the lock file by another program is not among them.
func (b *Backend) Readers(ctx context.Context, key string) ([]driver.Holder, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return nil, fileErr("list lock directory", err)
	}
	name := fileName(key)
	var tokens []uint64
	for _, e := range entries {
		if n, token, ok := readerOf(e.Name()); ok && n == name && e.Type().IsRegular() {
			tokens = append(tokens, token)
		}
	}
	hs, unread := b.readersOf(key, name, tokens)
	if len(unread) > 0 {
		return nil, errors.Join(unread...)
	}
	return hs, nil
}

// readersOf returns the live readers of key among the descriptions of
// name's tokens, by token, removing the dead ones' descriptions, and an
// error for each description it could not probe (naming it).
func (b *Backend) readersOf(key, name string, tokens []uint64) (hs []driver.Holder, unread []error) {
	for _, token := range tokens {
		path := filepath.Join(b.dir, readerName(name, token))
		in, live, err := b.probeReader(path)
		switch {
		case err != nil:
			unread = append(unread, err)
		case !live:
			// Unlocked: released, or its reader dead. No grant can lock
			// it again (a token is granted once), so it can go.
			os.Remove(path)
		case in.Key == key && uint64(in.Token) == token:
			hs = append(hs, driver.Holder{Key: key, Token: token, Owner: in.Owner, Since: in.Since, Shared: true})
		}
	}
	slices.SortFunc(hs, func(a, b driver.Holder) int { return cmp.Compare(a.Token, b.Token) })
	return hs, unread
}

// probeReader reports whether the reader's description at path is live
// (locked), and reads it.
func (b *Backend) probeReader(path string) (in info, live bool, err error) {
	f, err := openRegular(path)
	if err != nil {
		return info{}, false, fileErr("probe "+filepath.Base(path), err)
	}
	if f == nil {
		return info{}, false, nil
	}
	defer f.Close()
	free, err := flock(f, flockSH|flockNB)
	if err != nil {
		return info{}, false, fileErr("probe "+filepath.Base(path), err)
	}
	if free {
		flock(f, flockUN)
		return info{}, false, nil
	}
	data, err := io.ReadAll(io.LimitReader(f, maxInfo+1))
	if err != nil || len(data) > maxInfo || json.Unmarshal(data, &in) != nil {
		return info{}, true, nil // not a description this package wrote: no key matches
	}
	return in, true, nil
}

// readLease is a held shared flock on a key's lock file, and the lock of
// its description.
type readLease struct {
	b        *Backend
	key      string
	name     string
	path     string // the lock file
	descPath string
	token    uint64
	since    time.Time
	validity driver.Validity

	mu   sync.Mutex
	f    *os.File // the lock file, shared flock; nil once released or found lost
	desc *os.File // the description, exclusive flock; nil with f
}

func (r *readLease) Token() uint64             { return r.token }
func (r *readLease) Validity() driver.Validity { return r.validity }

// Key returns the key the lease was acquired for.
func (r *readLease) Key() string { return r.key }

// Refresh checks that the shared grant still holds the key, as a lock's
// Refresh does: not released, its lock file neither removed nor
// replaced. It keeps the lock file and the description from age-based
// cleaners the same way.
func (r *readLease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	sent := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	fi, err := r.checkLocked()
	if err != nil {
		return driver.Validity{}, err
	}
	if time.Since(fi.ModTime()) > touchAfter {
		_ = touch(r.f)
		_ = touch(r.desc)
	}
	return driver.Validity{Sent: sent}, nil
}

// checkLocked returns the status of the lock file, or an error matching
// ErrLockLost when the grant was released or its lock file removed or
// replaced (then the grant is dropped).
func (r *readLease) checkLocked() (os.FileInfo, error) {
	if r.f == nil {
		return nil, fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", driver.ErrLockLost, r.token, r.key)
	}
	fi, same, err := statSame(r.f, r.path)
	if err != nil {
		return nil, err
	}
	if !same {
		r.dropLocked()
		return nil, fmt.Errorf("%w: the lock file of %q was removed or replaced while token %d held it (shared)", driver.ErrLockLost, r.key, r.token)
	}
	return fi, nil
}

// Release gives the shared grant up: its description goes, then its
// flocks. It does not block.
func (r *readLease) Release(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, err := r.checkLocked()
	if r.f != nil {
		r.dropLocked()
	}
	if err != nil && !errors.Is(err, driver.ErrLockLost) {
		return nil // the check failed without showing a loss; released
	}
	return err
}

func (r *readLease) dropLocked() {
	os.Remove(r.descPath)
	unlockClose(r.desc)
	unlockClose(r.f)
	r.f, r.desc = nil, nil
	r.b.readers.remove(r)
}

// file returns a new descriptor of the lock file (see Backend.File): the
// shared flock belongs to its open file description.
func (r *readLease) file() (*os.File, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil, fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", driver.ErrLockLost, r.token, r.key)
	}
	f, err := dupFile(r.f)
	if err != nil {
		return nil, fileErr("duplicate lock file descriptor", err)
	}
	return f, nil
}

// readerSet holds the live shared grants of a Backend, for File.
type readerSet struct {
	mu sync.Mutex
	m  map[permitID]*readLease
}

func (s *readerSet) add(r *readLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[permitID]*readLease{}
	}
	s.m[permitID{r.name, r.token}] = r
}

func (s *readerSet) remove(r *readLease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, permitID{r.name, r.token})
}

func (s *readerSet) get(name string, token uint64) *readLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[permitID{name, token}]
}
