//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

// Permits of counting semaphores (driver.Semaphores).
//
// The files of a semaphore kept at a key whose name is N:
//
//	N.sem          the semaphore's own flock: its state is read under a
//	               shared flock of it, changed under an exclusive one,
//	               under which readers draw tokens too (see shared.go)
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
	"context"
	"errors"
	"fmt"
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
// exclusive flock, and the draws of other permits and of shared grants
// (readers) are excluded by the semaphore's flock, which the caller
// holds. A shared flock also leaves
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
