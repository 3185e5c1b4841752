//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

// Permits of counting semaphores (driver.Semaphores).
//
// The files of a semaphore kept at a key whose name is N:
//
//	N.sem          the semaphore's own flock: its state is read under a
//	               shared flock of it, changed under an exclusive one
//	N.sem.json     the state (semState), replaced whole by a rename
//	N.slot.<i>     slot i, i in [0, limit): held with an exclusive flock by
//	               the permit that has the slot
//	N.wait.<id>    a waiter's place in line, held with an exclusive flock
//	               by the waiter; id is its arrival number
//	N.lock         the key's lock file, whose token counter permits share
//
// Who is live is the kernel's to say: a permit while its slot file is
// locked, a waiter while its waiter file is; a process that dies drops
// both at once. The state lists them, with what the files cannot say (a
// permit's token and owner, the limit, the waiters' order); an entry whose
// file is no longer locked is a dead one's, purged by whoever next changes
// the state. A permit is granted only with its slot file locked, so no
// more than limit permits can be live whatever the state says.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	_ driver.Semaphores = (*Backend)(nil)
	_ driver.SlotLease  = (*permit)(nil)
)

// File name suffixes of a semaphore (see name.go's for a key's lock).
const (
	semSuffix   = ".sem"
	stateSuffix = ".sem.json"
	stateTmp    = ".sem.tmp"
	slotInfix   = ".slot."
	waitInfix   = ".wait."
)

// maxState bounds the size of a state that readState reads.
const maxState = 64 << 20

// semState is the state of a semaphore, in N.sem.json.
type semState struct {
	Key     string      `json:"key"`
	Limit   int         `json:"limit,omitempty"` // 0 when nothing holds or awaits a permit
	Next    uint64      `json:"next"`            // the next waiter's arrival number
	Holders []semHolder `json:"holders,omitempty"`
	Waiters []semWaiter `json:"waiters,omitempty"` // in arrival order
}

// semHolder is a permit, live while its slot file is locked.
type semHolder struct {
	Slot  int       `json:"slot"`
	Token infoToken `json:"token"`
	Slots bool      `json:"slots,omitempty"` // asked with Semaphore.Slots
	Owner string    `json:"owner,omitempty"`
	PID   int       `json:"pid"`
	Host  string    `json:"host,omitempty"`
	Since time.Time `json:"since"`
}

// semWaiter is a place in line, live while its waiter file is locked.
type semWaiter struct {
	ID    uint64    `json:"id"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"`
}

func slotName(name string, slot int) string { return name + slotInfix + strconv.Itoa(slot) }

func waitName(name string, id uint64) string {
	return name + waitInfix + strconv.FormatUint(id, 10)
}

// AcquirePermit implements driver.Semaphores. A permit is an exclusive
// flock on one of the semaphore's slot files, the lowest free one, taken
// under the semaphore's own flock, which also guards the stored limit and
// the line of waiters; its token comes from the key's lock file, whose
// counter locks of the key share. Like a lock, a permit has no time bound
// (Validity.TTL is 0) and comes back at once when its holder releases it
// or dies. Waiters of every process are served in arrival order; see the
// package documentation (Waiting).
func (b *Backend) AcquirePermit(ctx context.Context, key string, sem driver.Semaphore, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckPermit(ctx, key, sem, opts); err != nil {
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
	p, err := b.acquirePermit(wctx, key, sem, opts)
	switch {
	case err == nil:
		return p, nil
	case wctx.Err() == nil:
		return nil, err
	case ctx.Err() != nil:
		return nil, driver.Canceled(ctx)
	}
	return nil, ErrClosed
}

// permitWaiter is an AcquirePermit's place in the semaphore's line.
type permitWaiter struct {
	id   uint64
	path string
	f    *os.File // the waiter file, locked; nil until queued, and once gone
	// pred is the live waiter just before this one, as the last try
	// found the line; ok is false when this one is first.
	pred struct {
		id uint64
		ok bool
	}
}

// leave gives the place up: the waiter file goes, and its entry in the
// state is purged by the next change of the state.
func (w *permitWaiter) leave() {
	if w.f == nil {
		return
	}
	os.Remove(w.path)
	unlockClose(w.f)
	w.f = nil
}

// acquirePermit is AcquirePermit of checked input, while the Backend is
// open. It waits as grab does for a lock (see there): after a wake-up it
// tries again a few times over short pauses, since the kernel reports a
// close before it drops the closed file's lock.
func (b *Backend) acquirePermit(ctx context.Context, key string, sem driver.Semaphore, opts driver.AcquireOptions) (*permit, error) {
	name := fileName(key)
	w := &permitWaiter{}
	if !opts.Wait {
		p, why, err := b.tryPermit(ctx, key, name, sem, opts, nil)
		if err == nil && p == nil {
			err = fmt.Errorf("%w: %q: %s", driver.ErrNotAcquired, key, why)
		}
		return p, err
	}
	var sub *subscription
	defer func() { sub.close() }()
	watch := &semWatch{name: name}
	quick := driver.ExponentialBackoff(time.Millisecond, maxBurst)
	slow := driver.ExponentialBackoff(time.Millisecond, b.poll)
	burst, polls := 0, 0
	waiter := driver.Waiter[*permit]{
		Try: func(ctx context.Context, woke bool) (*permit, *driver.Held, error) {
			// Every change of the semaphore wakes the waiter while it
			// reads the state, so that none is missed before it knows
			// which concern it.
			watch.set(semWatchAll, 0)
			p, _, err := b.tryPermit(ctx, key, name, sem, opts, w)
			if err != nil || p != nil {
				return p, nil, err
			}
			if w.pred.ok {
				watch.set(semWatchPred, w.pred.id)
			} else {
				watch.set(semWatchFirst, 0)
			}
			if woke {
				burst = 1
			}
			var delay time.Duration
			switch {
			case sub == nil:
				polls++
				delay, _ = slow.Backoff(polls)
				return nil, &driver.Held{RetryIn: min(delay, b.poll)}, nil
			case burst > 0 && burst <= burstTries:
				delay, _ = quick.Backoff(burst)
				burst++
			default:
				burst, delay = 0, b.poll
			}
			return nil, &driver.Held{Wake: sub.C, RetryIn: min(delay, b.poll)}, nil
		},
		Leave: w.leave,
	}
	if canWatch {
		waiter.Subscribe = func(context.Context) (<-chan struct{}, error) {
			watch.set(semWatchAll, 0) // Wait tries again at once
			sub = b.w.subscribeMatch(b.dir, watch.match)
			return nil, nil
		}
	}
	return driver.Wait(ctx, waiter)
}

// What a waiter's watch of the lock directory wakes it for (semWatch).
const (
	// semWatchAll: any change of the semaphore, while the waiter tries.
	semWatchAll = iota
	// semWatchFirst: the first in line waits for a slot: a slot file
	// closed (its permit given back, or its holder dead), or the key's
	// lock file closed (a lock of the key released: see drawToken).
	semWatchFirst
	// semWatchPred: a waiter later in line waits for the one before it
	// to leave the line: its waiter file closed (it died) or removed
	// (granted, or gone).
	semWatchPred
)

// semWatch is what wakes one waiter of the semaphore name, so that a
// permit given back wakes the first waiter alone, and each waiter that
// leaves the line wakes the one after it.
type semWatch struct {
	name string
	mu   sync.Mutex
	what int
	pred uint64 // the waiter before, with semWatchPred
}

func (w *semWatch) set(what int, pred uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.what, w.pred = what, pred
}

// match reports whether a change of the directory's entry wakes the
// waiter. Changes of the semaphore's own flock file never do: every try
// opens and closes it.
func (w *semWatch) match(entry string) bool {
	rest, ok := strings.CutPrefix(entry, w.name)
	if !ok {
		return false
	}
	slot, isSlot := strings.CutPrefix(rest, slotInfix)
	isSlot = isSlot && isDecimal(slot)
	wait, isWait := strings.CutPrefix(rest, waitInfix)
	isWait = isWait && isDecimal(wait)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.what {
	case semWatchFirst:
		return isSlot || rest == lockSuffix
	case semWatchPred:
		return isWait && wait == strconv.FormatUint(w.pred, 10)
	}
	return isSlot || isWait || rest == lockSuffix || rest == stateSuffix
}

func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// tryPermit asks for a permit once, under the semaphore's exclusive
// flock: it purges the entries of dead holders and waiters, refuses a
// limit other than the stored one, and grants the lowest free slot when
// fewer than the limit are live and no live waiter is ahead of w (any
// live waiter, for a w nil or not yet queued). Otherwise it queues w, if
// not nil and not yet queued, and returns a nil permit and why.
func (b *Backend) tryPermit(ctx context.Context, key, name string, sem driver.Semaphore, opts driver.AcquireOptions, w *permitWaiter) (*permit, string, error) {
	sf, err := b.lockState(ctx, name, flockEX)
	if err != nil {
		return nil, "", err
	}
	defer unlockClose(sf)
	st, err := b.readState(key, name)
	if err != nil {
		return nil, "", err
	}
	changed, err := b.purge(name, &st)
	if err != nil {
		return nil, "", err
	}
	queued := w != nil && w.f != nil
	if len(st.Holders) == 0 && len(st.Waiters) == 0 {
		// Nothing holds or awaits a permit: the asker sets the limit.
		if st.Limit != sem.Limit {
			st.Limit, changed = sem.Limit, true
		}
	} else if st.Limit != sem.Limit {
		if changed {
			_ = b.writeState(name, st) // the purge: best effort
		}
		return nil, "", &driver.LimitError{Stored: st.Limit, Asked: sem.Limit}
	}
	ahead := slices.ContainsFunc(st.Waiters, func(x semWaiter) bool { return !queued || x.ID < w.id })
	why := fmt.Sprintf("all %d permits are held", sem.Limit)
	if ahead {
		why = "others wait for a permit before it"
	}
	if len(st.Holders) < sem.Limit && !ahead {
		p, held, err := b.grantPermit(key, name, sem, opts, &st)
		switch {
		case err != nil:
			return nil, "", err
		case p != nil:
			if queued {
				st.Waiters = slices.DeleteFunc(st.Waiters, func(x semWaiter) bool { return x.ID == w.id })
			}
			if err := b.writeState(name, st); err != nil {
				p.drop()
				return nil, "", fileErr("write semaphore state", err)
			}
			if w != nil {
				w.leave()
			}
			b.permits.add(p)
			return p, "", nil
		}
		why = held
	}
	if w != nil && !queued {
		if err := b.queuePermit(name, &st, w); err != nil {
			return nil, "", err
		}
		changed = true
	}
	if changed {
		if err := b.writeState(name, st); err != nil {
			if w != nil && !queued {
				w.leave()
			}
			return nil, "", fileErr("write semaphore state", err)
		}
	}
	if w != nil {
		w.pred.ok = false
		for _, x := range st.Waiters {
			if x.ID < w.id {
				w.pred.id, w.pred.ok = x.ID, true
			}
		}
	}
	return nil, why, nil
}

// grantPermit takes the lowest free slot of st's semaphore and a token
// for it, and records the permit in st. It returns a nil permit and why
// when it cannot: a slot file locked by another (a permit the state
// does not list), or a lock of the key held.
func (b *Backend) grantPermit(key, name string, sem driver.Semaphore, opts driver.AcquireOptions, st *semState) (*permit, string, error) {
	used := make(map[int]bool, len(st.Holders))
	for _, h := range st.Holders {
		used[h.Slot] = true
	}
	for slot := 0; slot < sem.Limit; slot++ {
		if used[slot] {
			continue
		}
		path := filepath.Join(b.dir, slotName(name, slot))
		f, ok, err := b.lockNew(path)
		if err != nil {
			return nil, "", err
		}
		if !ok {
			continue // locked by a permit the state does not list
		}
		token, ok, err := b.drawToken(key, name)
		if err != nil || !ok {
			unlockClose(f)
			return nil, "a lock of the key is held", err
		}
		now := time.Now()
		p := &permit{b: b, key: key, name: name, path: path, slot: -1, token: token, since: now,
			validity: driver.Validity{Sent: now, TTL: 0}, f: f}
		h := semHolder{Slot: slot, Token: infoToken(token), Owner: opts.Owner, PID: os.Getpid(), Host: b.host, Since: now}
		if sem.Slots {
			p.slot, h.Slots = slot, true
		}
		st.Holders = append(st.Holders, h)
		return p, "", nil
	}
	return nil, fmt.Sprintf("all %d slots are held", sem.Limit), nil
}

// lockNew opens (creating if needed) the file at path, a slot or waiter
// file, checked as a lock file, and takes its exclusive flock without
// waiting. It reports false, with no file, when another holds the flock.
func (b *Backend) lockNew(path string) (*os.File, bool, error) {
	for {
		f, err := b.openLock(path)
		if err != nil {
			return nil, false, err
		}
		ok, err := flock(f, flockEX|flockNB)
		switch {
		case err != nil:
			f.Close()
			return nil, false, fileErr("lock", err)
		case !ok:
			f.Close()
			return nil, false, nil
		}
		same, err := sameFile(f, path)
		switch {
		case err != nil:
			unlockClose(f)
			return nil, false, err
		case same:
			return f, true, nil
		}
		unlockClose(f) // removed after we opened it: the current file
	}
}

// drawToken takes the key's next token from its lock file, under a
// shared flock of it: that excludes the grants of locks, which take its
// exclusive flock, and the grants of other permits are excluded by the
// semaphore's flock, which the caller holds. A shared flock also leaves
// the key free to List and Holder, which probe with one. It reports
// false when a lock of the key holds (or is taking) the lock file.
func (b *Backend) drawToken(key, name string) (uint64, bool, error) {
	path := filepath.Join(b.dir, name+lockSuffix)
	for {
		f, err := b.openLock(path)
		if err != nil {
			return 0, false, err
		}
		ok, err := flock(f, flockSH|flockNB)
		switch {
		case err != nil:
			f.Close()
			return 0, false, fileErr("lock", err)
		case !ok:
			f.Close()
			return 0, false, nil
		}
		same, err := sameFile(f, path)
		if err != nil {
			unlockClose(f)
			return 0, false, err
		}
		if !same {
			unlockClose(f)
			continue
		}
		token, err := nextToken(f, key, b.dir)
		unlockClose(f)
		return token, err == nil, err
	}
}

// queuePermit puts w at the end of st's line: a new waiter file, locked.
func (b *Backend) queuePermit(name string, st *semState, w *permitWaiter) error {
	id := st.Next
	path := filepath.Join(b.dir, waitName(name, id))
	// A file left with this name (a state that was lost) goes first: the
	// new one is created afresh, never opened through a name another made.
	os.Remove(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, b.perm)
	if err != nil {
		return fileErr("create waiter file", err)
	}
	if ok, err := flock(f, flockEX|flockNB); err != nil || !ok {
		f.Close()
		os.Remove(path)
		if err == nil {
			err = errors.New("locked by another")
		}
		return fileErr("lock waiter file", err)
	}
	st.Next++
	st.Waiters = append(st.Waiters, semWaiter{ID: id, PID: os.Getpid(), Since: time.Now()})
	w.id, w.path, w.f = id, path, f
	return nil
}

// lockState takes the semaphore's flock, exclusive or shared (how), and
// returns its file; with a shared flock it returns a nil file, and no
// error, for a semaphore that never had one. The flock is held for short
// reads and writes only; a blocking flock cannot be cancelled, so it is
// tried without blocking, over short, growing, jittered pauses until ctx
// ends.
func (b *Backend) lockState(ctx context.Context, name string, how int) (*os.File, error) {
	path := filepath.Join(b.dir, name+semSuffix)
	pause := driver.ExponentialBackoff(100*time.Microsecond, 20*time.Millisecond)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for tries := 1; ; tries++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var f *os.File
		var err error
		if how == flockEX {
			// Read only: closing it then wakes no waiter (see semWatch.match).
			f, err = os.OpenFile(path, os.O_RDONLY|os.O_CREATE|syscall.O_NOFOLLOW, b.perm)
			if err == nil {
				if err = b.checkLockFile(f); err != nil {
					f.Close()
					return nil, err
				}
			}
		} else {
			f, err = openRegular(path)
			if err == nil && f == nil {
				return nil, nil
			}
		}
		if err != nil {
			return nil, fileErr("open semaphore file", err)
		}
		ok, err := flock(f, how|flockNB)
		if err != nil {
			f.Close()
			return nil, fileErr("lock semaphore file", err)
		}
		if ok {
			same, err := sameFile(f, path)
			if err != nil {
				unlockClose(f)
				return nil, err
			}
			if same {
				return f, nil
			}
			unlockClose(f) // removed after we opened it: the current file
			continue
		}
		f.Close()
		d, _ := pause.Backoff(tries)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// readState reads the state of the semaphore of key. A state that is
// missing, unreadable as JSON or another key's is an empty one: it lists
// only live processes, so only a machine's crash or another's hand can
// have damaged it, and after a crash nothing is live.
func (b *Backend) readState(key, name string) (semState, error) {
	empty := semState{Key: key}
	f, err := openRegular(filepath.Join(b.dir, name+stateSuffix))
	if err != nil {
		return empty, fileErr("open semaphore state", err)
	}
	if f == nil {
		return empty, nil
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxState+1))
	if err != nil {
		return empty, fileErr("read semaphore state", err)
	}
	var st semState
	if len(data) > maxState || json.Unmarshal(data, &st) != nil || st.Key != key {
		return semState{Key: key, Next: st.Next}, nil
	}
	return st, nil
}

// writeState replaces the state of the semaphore name, under its
// exclusive flock: through a file created afresh, renamed into place, so
// that a reader sees the old state or the new one, never a torn one. It
// is not synced: it lists live processes only, none of which survives a
// crash of the machine.
func (b *Backend) writeState(name string, st semState) error {
	if len(st.Holders) == 0 && len(st.Waiters) == 0 {
		st.Limit = 0
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(b.dir, name+stateTmp)
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, b.perm)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, filepath.Join(b.dir, name+stateSuffix))
}

// purge drops from st the holders whose slot file and the waiters whose
// waiter file are no longer locked (released, or dead), removing dead
// waiters' files, and reports whether it dropped any.
func (b *Backend) purge(name string, st *semState) (bool, error) {
	n, m := len(st.Holders), len(st.Waiters)
	var err error
	st.Holders = slices.DeleteFunc(st.Holders, func(h semHolder) bool {
		live, perr := b.locked(filepath.Join(b.dir, slotName(name, h.Slot)))
		err = cmp.Or(err, perr)
		return perr == nil && !live
	})
	st.Waiters = slices.DeleteFunc(st.Waiters, func(w semWaiter) bool {
		path := filepath.Join(b.dir, waitName(name, w.ID))
		live, perr := b.locked(path)
		err = cmp.Or(err, perr)
		if perr == nil && !live {
			os.Remove(path)
			return true
		}
		return false
	})
	return len(st.Holders) != n || len(st.Waiters) != m, err
}

// locked reports whether the file at path is locked (by a flock of any
// kind): read only, so that closing it wakes nobody.
func (b *Backend) locked(path string) (bool, error) {
	f, err := openRegular(path)
	if err != nil {
		return false, fileErr("probe "+filepath.Base(path), err)
	}
	if f == nil {
		return false, nil
	}
	defer f.Close()
	free, err := flock(f, flockSH|flockNB)
	if err != nil {
		return false, fileErr("probe "+filepath.Base(path), err)
	}
	if free {
		flock(f, flockUN)
	}
	return !free, nil
}

// Permits implements driver.Semaphores: the live permits, the stored
// limit and the live waiters of the semaphore at key, read under a shared
// flock of the semaphore (an exclusive one is held only while its state
// changes). Expires is zero: permits have no time bound.
func (b *Backend) Permits(ctx context.Context, key string) (driver.PermitState, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.PermitState{}, err
	}
	name := fileName(key)
	sf, err := b.lockState(ctx, name, flockSH)
	if err != nil || sf == nil {
		return driver.PermitState{}, err
	}
	defer unlockClose(sf)
	st, err := b.readState(key, name)
	if err != nil {
		return driver.PermitState{}, err
	}
	var ps driver.PermitState
	for _, h := range st.Holders {
		live, err := b.locked(filepath.Join(b.dir, slotName(name, h.Slot)))
		if err != nil {
			return driver.PermitState{}, err
		}
		if live {
			ph := driver.Holder{Key: key, Token: uint64(h.Token), Owner: h.Owner, Since: h.Since}
			if h.Slots {
				ph.Slot, ph.HasSlot = h.Slot, true
			}
			ps.Holders = append(ps.Holders, ph)
		}
	}
	for _, w := range st.Waiters {
		live, err := b.locked(filepath.Join(b.dir, waitName(name, w.ID)))
		if err != nil {
			return driver.PermitState{}, err
		}
		if live {
			ps.Waiting++
		}
	}
	if len(ps.Holders) > 0 || ps.Waiting > 0 {
		ps.Limit = st.Limit
	}
	slices.SortFunc(ps.Holders, func(a, b driver.Holder) int { return cmp.Compare(a.Token, b.Token) })
	return ps, nil
}

// permit is a held slot of a semaphore: an exclusive flock on its slot
// file.
type permit struct {
	b        *Backend
	key      string
	name     string
	path     string // the slot file
	slot     int    // -1: not asked with Slots
	token    uint64
	since    time.Time
	validity driver.Validity

	mu sync.Mutex
	f  *os.File // nil once released or found lost
}

func (p *permit) Token() uint64             { return p.token }
func (p *permit) Validity() driver.Validity { return p.validity }

// Slot returns the permit's slot, or -1 for a permit not asked with
// Semaphore.Slots.
func (p *permit) Slot() int { return p.slot }

// Key returns the semaphore's key.
func (p *permit) Key() string { return p.key }

// Refresh checks that the permit is still held: not released, its slot
// file neither removed nor replaced. It keeps the slot file from
// age-based cleaners as a lock's Refresh keeps its lock file.
func (p *permit) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	sent := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	fi, err := p.checkLocked()
	if err != nil {
		return driver.Validity{}, err
	}
	if time.Since(fi.ModTime()) > touchAfter {
		_ = touch(p.f)
	}
	return driver.Validity{Sent: sent}, nil
}

// checkLocked returns the status of the slot file, or an error matching
// ErrLockLost when the permit was released or its slot file removed or
// replaced (then the permit is dropped).
func (p *permit) checkLocked() (fs.FileInfo, error) {
	if p.f == nil {
		return nil, fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", driver.ErrLockLost, p.token, p.key)
	}
	fi, same, err := statSame(p.f, p.path)
	if err != nil {
		return nil, err
	}
	if !same {
		p.dropLocked()
		return nil, fmt.Errorf("%w: the slot file of %q was removed or replaced while token %d held it", driver.ErrLockLost, p.key, p.token)
	}
	return fi, nil
}

// Release gives the permit back: it unlocks and closes the slot file,
// which wakes the semaphore's waiters. Its entry in the state is purged
// by the next change of the state. It does not block.
func (p *permit) Release(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.checkLocked()
	if p.f != nil {
		p.dropLocked()
	}
	if err != nil && !errors.Is(err, driver.ErrLockLost) {
		return nil // the check failed without showing a loss; released
	}
	return err
}

func (p *permit) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropLocked()
}

func (p *permit) dropLocked() {
	unlockClose(p.f)
	p.f = nil
	p.b.permits.remove(p)
}

// permitSet holds the live permits of a Backend, for File.
type permitSet struct {
	mu sync.Mutex
	m  map[permitID]*permit
}

type permitID struct {
	name  string
	token uint64
}

func (s *permitSet) add(p *permit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[permitID]*permit{}
	}
	s.m[permitID{p.name, p.token}] = p
}

func (s *permitSet) remove(p *permit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, permitID{p.name, p.token})
}

func (s *permitSet) get(name string, token uint64) *permit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[permitID{name, token}]
}

// file returns a new descriptor of the slot file (see Backend.File).
func (p *permit) file() (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		return nil, fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", driver.ErrLockLost, p.token, p.key)
	}
	f, err := dupFile(p.f)
	if err != nil {
		return nil, fileErr("duplicate slot file descriptor", err)
	}
	return f, nil
}
