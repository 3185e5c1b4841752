package driver

import "sync"

// Tracker says whether a backend is open, and runs the goroutines the
// backend starts so that its Close can wait for them. It is safe for
// concurrent use; make one with NewTracker.
//
// Close calls Shut, ends what it must, then calls Wait. A backend whose own
// mutex guards state that must change together with the open state (a map
// of live sessions or leases) calls Shut while holding that mutex: then,
// under that mutex, Closed cannot change. The lock order is the backend's
// mutex before the Tracker's; the Tracker calls nothing while it holds its
// own.
type Tracker struct {
	closedErr error

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // the goroutines of Go and GoAlways
}

// NewTracker returns an open Tracker whose CheckOpen returns closedErr
// once it is shut: the package's ErrClosed (see ClosedError).
func NewTracker(closedErr error) *Tracker { return &Tracker{closedErr: closedErr} }

// CheckOpen returns nil while the Tracker is open, and the error given to
// NewTracker after Shut.
func (t *Tracker) CheckOpen() error {
	if t.Closed() {
		return t.closedErr
	}
	return nil
}

// Closed reports whether Shut was called.
func (t *Tracker) Closed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Go runs f in a goroutine that Wait waits for, unless the Tracker is shut;
// it reports whether it started f.
func (t *Tracker) Go(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Go(f)
	return true
}

// Enter counts work that Wait waits for, done by the caller's own
// goroutine (it calls Leave when it is done), unless the Tracker is shut;
// it reports whether it counted it.
func (t *Tracker) Enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

// Leave ends what Enter counted.
func (t *Tracker) Leave() { t.wg.Done() }

// GoAlways runs f in a goroutine that Wait waits for, shut or not. It is
// for a goroutine of something that Close ends before it calls Wait (the
// watcher of a grant that Close gives up), which may start between Shut
// and Wait; starting one after Wait has begun is a bug, as it is for a
// sync.WaitGroup.
func (t *Tracker) GoAlways(f func()) { t.wg.Go(f) }

// Shut marks the Tracker closed: from then on Go starts nothing and
// CheckOpen fails. It reports whether this call closed it, false if it
// was already closed.
func (t *Tracker) Shut() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.closed = true
	return true
}

// Wait waits for every goroutine started by Go and GoAlways to return.
// Call it after Shut, so that no goroutine of Go starts while it waits.
func (t *Tracker) Wait() { t.wg.Wait() }
