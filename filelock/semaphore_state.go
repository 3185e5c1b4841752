//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

// The state of a semaphore, and how it is read, changed and listed.

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/distlock/distlock/driver"
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
