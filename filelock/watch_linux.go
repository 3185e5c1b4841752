//go:build linux

package filelock

import (
	"encoding/binary"
	"os"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// canWatch: waiters are woken by inotify.
const canWatch = true

// watcher wakes the waiters of one Backend when their lock files are closed
// (a holder releasing or dying closes its file), removed or replaced. It
// multiplexes one inotify instance, and its one reading goroutine, over all
// the waiters; both exist only while someone waits.
type watcher struct {
	mu   sync.Mutex
	inst *inotify // nil while nobody waits
}

type inotify struct {
	f      *os.File // non-blocking, so reads park in the runtime poller
	fd     int
	subs   map[int32]map[*subscription]struct{} // by watch descriptor
	n      int                                  // live subscriptions
	closed bool
}

// subscription is one waiter's interest in one lock file, or one holder
// watch's interest in the files of one key (a watch of the directory,
// whose events names filters). C receives a value (coalesced) after each
// event on the files.
type subscription struct {
	C     chan struct{}
	w     *watcher
	inst  *inotify
	wd    int32
	names []string          // for a directory watch: the entries it concerns
	match func(string) bool // or, if set, the test of the entries it concerns
}

// watchMask: a close may be a release (IN_CLOSE_*); a removal or rename
// changes which file the path names (IN_ATTRIB reports the unlink).
const watchMask = unix.IN_CLOSE_WRITE | unix.IN_CLOSE_NOWRITE | unix.IN_ATTRIB |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// dirMask: the changes of a key's holder, seen in its directory. A grant
// writes the token counter into the lock file (IN_MODIFY) and renames the
// holder description into place (IN_MOVED_TO), as SetOwner does; a
// release removes the description (IN_DELETE) and closes the lock file,
// as a holder's death does (IN_CLOSE_WRITE: the lock file is open for
// writing). Closes of files opened for reading only are left out: List's
// and Holder's probes make them, and would wake the watch that made them.
const dirMask = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM |
	unix.IN_CREATE | unix.IN_DELETE | unix.IN_ONLYDIR

// subscribe watches the file at path. It returns nil when the system cannot
// watch it (inotify limits reached); the caller then polls.
func (w *watcher) subscribe(path string) *subscription {
	return w.add(path, watchMask, nil, nil, nil)
}

// subscribeDir watches the entries names of the directory dir (every
// subscription of a directory has the same mask, dirMask: a watch's mask
// is per inode). It returns nil when the system cannot watch it.
func (w *watcher) subscribeDir(dir string, names ...string) *subscription {
	return w.add(dir, dirMask, names, nil, nil)
}

// subscribeMatch watches the entries of the directory dir whose names
// match reports (with dirMask, as subscribeDir). It returns nil when the
// system cannot watch it.
func (w *watcher) subscribeMatch(dir string, match func(name string) bool) *subscription {
	return w.add(dir, dirMask, nil, match, nil)
}

// subscribeDirTo is subscribeDir delivering its wake-ups to c, another
// subscription's C: one waiter, woken by the changes of two watches.
func (w *watcher) subscribeDirTo(c chan struct{}, dir string, names ...string) *subscription {
	return w.add(dir, dirMask, names, nil, c)
}

func (w *watcher) add(path string, mask uint32, names []string, match func(string) bool, c chan struct{}) *subscription {
	if c == nil {
		c = make(chan struct{}, 1)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	inst := w.inst
	fresh := inst == nil
	if fresh {
		fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
		if err != nil {
			return nil
		}
		inst = &inotify{f: os.NewFile(uintptr(fd), "inotify"), fd: fd, subs: map[int32]map[*subscription]struct{}{}}
	}
	wd, err := unix.InotifyAddWatch(inst.fd, path, mask)
	if err != nil {
		if fresh {
			inst.f.Close()
		}
		return nil
	}
	if fresh {
		w.inst = inst
		go w.read(inst)
	}
	s := &subscription{C: c, w: w, inst: inst, wd: int32(wd), names: names, match: match}
	set := inst.subs[s.wd]
	if set == nil {
		set = map[*subscription]struct{}{}
		inst.subs[s.wd] = set
	}
	set[s] = struct{}{}
	inst.n++
	return s
}

// close ends the subscription; the last one closes the inotify instance,
// which ends its reading goroutine.
func (s *subscription) close() {
	if s == nil {
		return
	}
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	inst := s.inst
	set := inst.subs[s.wd]
	delete(set, s)
	if len(set) == 0 {
		delete(inst.subs, s.wd)
		if !inst.closed {
			// Fails harmlessly when the file's removal already ended the watch.
			unix.InotifyRmWatch(inst.fd, uint32(s.wd))
		}
	}
	inst.n--
	if inst.n == 0 && !inst.closed {
		inst.closed = true
		inst.f.Close()
		if w.inst == inst {
			w.inst = nil
		}
	}
}

func (s *subscription) wake() {
	select {
	case s.C <- struct{}{}:
	default:
	}
}

// read delivers events until the instance is closed. If reading fails
// otherwise, the waiters fall back to their poll timers.
func (w *watcher) read(inst *inotify) {
	buf := make([]byte, 4096)
	for {
		n, err := inst.f.Read(buf)
		if err != nil {
			w.mu.Lock()
			if !inst.closed {
				inst.closed = true
				inst.f.Close()
				if w.inst == inst {
					w.inst = nil
				}
			}
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			start := off + unix.SizeofInotifyEvent
			off = start + nameLen
			name := ""
			if nameLen > 0 && off <= n {
				name = strings.TrimRight(string(buf[start:off]), "\x00")
			}
			if mask&unix.IN_Q_OVERFLOW != 0 {
				for _, set := range inst.subs {
					for s := range set {
						s.wake()
					}
				}
				continue
			}
			for s := range inst.subs[wd] {
				if s.match != nil && s.match(name) || s.match == nil && (s.names == nil || slices.Contains(s.names, name)) {
					s.wake()
				}
			}
		}
		w.mu.Unlock()
	}
}
