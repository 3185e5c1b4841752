package memlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Backend        = (*Backend)(nil)
	_ driver.BatchRefresher = (*Backend)(nil)
	_ driver.Lister         = (*Backend)(nil)
	_ driver.HolderReader   = (*Backend)(nil)
	_ driver.HolderWatcher  = (*Backend)(nil)
	_ driver.SharedLocks    = (*Backend)(nil)
	_ driver.OwnerSetter    = (*lease)(nil)
)

// ErrClosed is matched by the errors of a Backend used after Close; it
// matches distlock.ErrClosed.
var ErrClosed = driver.ClosedError("memlock")

// Backend is the in-process lock service. The zero value is not usable; call
// New. It is safe for concurrent use.
type Backend struct {
	queue driver.Queue[struct{}] // acquirers of each key, first come first served

	closing context.Context // ends at Close
	close   context.CancelFunc

	mu   sync.Mutex
	keys map[string]*entry
}

type entry struct {
	key     string
	token   uint64 // last token granted; never reset
	holder  *lease // the exclusive holder; nil when none
	expires time.Time
	timer   *time.Timer // fires at expires, to free the key
	// readers are the shared grants, each with its own expiry and timer.
	readers map[*lease]struct{}
	writers int           // exclusive Acquires under way: readers queue behind them
	gone    chan struct{} // closed when a grant goes; made when awaited (goneLocked)
	// watchers are woken (a value, coalesced) at each change of holder or
	// owner; each is closed when its watch ends.
	watchers map[chan struct{}]struct{}
	sem      *semaphore // the semaphore kept at key, if any
}

// New returns an empty lock service. It cannot fail, so unlike the
// constructors of the network backends it returns no error.
func New() *Backend {
	b := &Backend{keys: map[string]*entry{}}
	b.closing, b.close = context.WithCancel(context.Background())
	return b
}

// Close ends every waiting Acquire with an error matching ErrClosed, and
// makes later ones fail with it. Leases granted before keep their keys
// until they are released or expire, and can still be refreshed, as on a
// service whose client went away. Calling Close again does nothing.
func (b *Backend) Close() error {
	b.close()
	return nil
}

// waitTurn waits for the turn of a place in a key's line behind this
// Backend's other acquirers, until ctx ends or the Backend is closed.
func (b *Backend) waitTurn(ctx context.Context, p *driver.Place[struct{}]) (*driver.Turn[struct{}], error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(b.closing, cancel)()
	t, err := p.Wait(wctx)
	switch {
	case err == nil:
		return t, nil
	case ctx.Err() != nil:
		return nil, driver.Canceled(ctx)
	}
	return nil, ErrClosed
}

// Acquire implements driver.Backend. Waiters are served in arrival order:
// they queue for the key's turn, and the one that has it waits for the
// holder to go (a release, an expiry or a revocation wakes it at once).
func (b *Backend) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	return b.acquire(ctx, key, opts, false)
}

// AcquireShared implements driver.SharedLocks. While no writer holds the
// key or is acquiring it, a reader is granted at once. Otherwise it queues
// for the key's turn behind the writers: the one that has the turn is
// granted as soon as no writer holds the key, and passes the turn on, so
// that readers in a row overlap while a writer that has the turn keeps
// later readers out until it is granted.
func (b *Backend) AcquireShared(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	return b.acquire(ctx, key, opts, true)
}

func (b *Backend) acquire(ctx context.Context, key string, opts driver.AcquireOptions, shared bool) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	if b.closing.Err() != nil {
		return nil, ErrClosed
	}
	// An acquirer takes its place in the key's line under b.mu, with the
	// state readers judge by (writers): a reader that finds a writer
	// acquiring is behind it in the line, never in between the writer's
	// count and its place.
	var (
		turn  *driver.Turn[struct{}]
		place *driver.Place[struct{}]
	)
	b.mu.Lock()
	e := b.entryLocked(key)
	if shared {
		// No writer holds or waits: the reader shares at once, without
		// the turn (a turn taken by a reader would refuse the others'
		// tries). Otherwise it queues for the turn behind the writers.
		b.expireLocked(e, time.Now())
		if e.holder == nil && e.writers == 0 {
			l := b.grantLocked(e, opts, true)
			b.mu.Unlock()
			return l, nil
		}
		if !opts.Wait {
			b.mu.Unlock()
			return nil, fmt.Errorf("%w: memlock: held (or awaited) by a writer", driver.ErrNotAcquired)
		}
	} else {
		e.writers++
		defer func() {
			b.mu.Lock()
			e.writers--
			b.mu.Unlock()
		}()
	}
	if t, ok := b.queue.Try(key); ok {
		turn = t // nobody has the turn or waits for it: no context to make
	} else if opts.Wait {
		place = b.queue.Enter(key)
	}
	b.mu.Unlock()
	if place != nil {
		t, err := b.waitTurn(ctx, place)
		if err != nil {
			return nil, err
		}
		turn = t
	} else if turn == nil {
		return nil, fmt.Errorf("%w: memlock: held (or awaited)", driver.ErrNotAcquired)
	}
	defer turn.Done()
	// A try's answer is atomic with the watch it returns: gone is closed
	// when a grant it saw goes.
	try := func(context.Context, bool) (*lease, *driver.Held, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		e := b.entryLocked(key)
		b.expireLocked(e, time.Now())
		if e.holder == nil && (shared || len(e.readers) == 0) {
			return b.grantLocked(e, opts, shared), nil, nil
		}
		return nil, &driver.Held{Wake: e.goneLocked()}, nil
	}
	if !opts.Wait {
		if l, _, _ := try(ctx, false); l != nil {
			return l, nil
		}
		return nil, fmt.Errorf("%w: memlock: held", driver.ErrNotAcquired)
	}
	l, err := driver.Wait(ctx, driver.Waiter[*lease]{
		Try:     try,
		Closing: b.closing.Done(),
		Closed:  func() error { return ErrClosed },
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (b *Backend) entryLocked(key string) *entry {
	e := b.keys[key]
	if e == nil {
		e = &entry{key: key}
		b.keys[key] = e
	}
	return e
}

// grantLocked makes a new lease the holder of e, or one of its readers.
func (b *Backend) grantLocked(e *entry, opts driver.AcquireOptions, shared bool) *lease {
	now := time.Now()
	e.token++
	l := &lease{b: b, e: e, token: e.token, owner: opts.Owner, onLost: opts.OnLost,
		since: now, validity: driver.Validity{Sent: now, TTL: opts.TTL}, shared: shared}
	if shared {
		if e.readers == nil {
			e.readers = map[*lease]struct{}{}
		}
		e.readers[l] = struct{}{}
		b.armReaderLocked(l, now, opts.TTL)
		return l
	}
	e.holder = l
	b.armLocked(e, now, opts.TTL)
	e.notifyLocked()
	return l
}

// goneLocked returns a channel closed when a grant of e goes.
func (e *entry) goneLocked() chan struct{} {
	if e.gone == nil {
		e.gone = make(chan struct{})
	}
	return e.gone
}

// signalGoneLocked wakes whoever waits for a grant of e to go.
func (e *entry) signalGoneLocked() {
	if e.gone != nil {
		close(e.gone)
		e.gone = nil
	}
}

// notifyLocked wakes the watchers of e.
func (e *entry) notifyLocked() {
	for ch := range e.watchers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// armLocked sets e's expiry to now+ttl.
func (b *Backend) armLocked(e *entry, now time.Time, ttl time.Duration) {
	e.expires = now.Add(ttl)
	if e.timer == nil {
		e.timer = time.AfterFunc(ttl, func() { b.onTimer(e) })
	} else {
		e.timer.Reset(ttl)
	}
}

func (b *Backend) onTimer(e *entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e.holder != nil && time.Now().Before(e.expires) {
		e.timer.Reset(time.Until(e.expires))
		return
	}
	b.expireLocked(e, time.Now())
}

// expireLocked drops an expired holder or reader silently, waking the
// next waiter.
func (b *Backend) expireLocked(e *entry, now time.Time) {
	if e.holder != nil && !now.Before(e.expires) {
		b.freeLocked(e, e.holder)
	}
	for r := range e.readers {
		if !now.Before(r.expires) {
			b.freeLocked(e, r)
		}
	}
}

// freeLocked removes l as holder or reader of e, if it is, and wakes the
// waiter that has e's turn.
func (b *Backend) freeLocked(e *entry, l *lease) bool {
	if l.shared {
		if _, ok := e.readers[l]; !ok {
			return false
		}
		delete(e.readers, l)
		l.timer.Stop()
		e.signalGoneLocked()
		return true
	}
	if e.holder != l {
		return false
	}
	e.holder = nil
	e.timer.Stop()
	e.signalGoneLocked()
	e.notifyLocked()
	return true
}

// heldLocked reports whether l still holds its key.
func (l *lease) heldLocked() bool {
	if l.shared {
		_, ok := l.e.readers[l]
		return ok
	}
	return l.e.holder == l
}

// Revoke drops the current grants of key, its lock, its shared locks and
// every live permit of its semaphore, as a session service does when the holders' sessions
// end, and tells each holder through its OnLost callback before anyone
// else can be granted what it held. It reports whether there was a grant
// to drop.
func (b *Backend) Revoke(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.keys[key]
	if e == nil {
		return false
	}
	revoked := b.revokePermitsLocked(e)
	for r := range e.readers {
		if r.onLost != nil {
			r.onLost(fmt.Errorf("%w: revoked by the service", driver.ErrLockLost))
		}
		b.freeLocked(e, r)
		revoked = true
	}
	if e.holder == nil {
		return revoked
	}
	if l := e.holder; l.onLost != nil {
		l.onLost(fmt.Errorf("%w: revoked by the service", driver.ErrLockLost))
	}
	b.freeLocked(e, e.holder)
	return true
}

// List implements driver.Lister.
func (b *Backend) List(_ context.Context, prefix string) ([]driver.Holder, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var hs []driver.Holder
	for k, e := range b.keys {
		b.expireLocked(e, now)
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if e.holder != nil {
			hs = append(hs, driver.Holder{Key: k, Token: e.holder.token, Owner: e.holder.owner,
				Since: e.holder.since, Expires: e.expires})
		}
		hs = append(hs, e.readersLocked()...)
	}
	slices.SortFunc(hs, func(a, b driver.Holder) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		if a.Shared != b.Shared {
			if a.Shared {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.Token, b.Token)
	})
	return hs, nil
}

// readersLocked lists the readers of e, sorted by token.
func (e *entry) readersLocked() []driver.Holder {
	hs := make([]driver.Holder, 0, len(e.readers))
	for r := range e.readers {
		hs = append(hs, driver.Holder{Key: e.key, Token: r.token, Owner: r.owner,
			Since: r.since, Expires: r.expires, Shared: true})
	}
	slices.SortFunc(hs, func(a, b driver.Holder) int { return cmp.Compare(a.Token, b.Token) })
	return hs
}

// Readers implements driver.SharedLocks.
func (b *Backend) Readers(_ context.Context, key string) ([]driver.Holder, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.keys[key]
	if e == nil {
		return nil, nil
	}
	b.expireLocked(e, time.Now())
	return e.readersLocked(), nil
}

// Holder implements driver.HolderReader.
func (b *Backend) Holder(_ context.Context, key string) (driver.Holder, bool, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.Holder{}, false, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.keys[key]
	if e == nil {
		return driver.Holder{}, false, nil
	}
	b.expireLocked(e, time.Now())
	if e.holder == nil {
		return driver.Holder{}, false, nil
	}
	return driver.Holder{Key: key, Token: e.holder.token, Owner: e.holder.owner,
		Since: e.holder.since, Expires: e.expires}, true, nil
}

// WatchHolder implements driver.HolderWatcher. Every change is announced,
// an expiry included (a timer frees the key at its expiry). The watch
// ends when ctx ends or the Backend is closed.
func (b *Backend) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	if b.closing.Err() != nil {
		return nil, ErrClosed
	}
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	e := b.entryLocked(key)
	if e.watchers == nil {
		e.watchers = map[chan struct{}]struct{}{}
	}
	e.watchers[ch] = struct{}{}
	b.mu.Unlock()
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.closing, cancel)
	context.AfterFunc(wctx, func() {
		stop()
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(e.watchers, ch)
		close(ch)
	})
	return ch, nil
}

// RefreshAll implements driver.BatchRefresher.
func (b *Backend) RefreshAll(_ context.Context, leases []driver.Lease, ttl time.Duration) []driver.RefreshResult {
	res := make([]driver.RefreshResult, len(leases))
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, dl := range leases {
		if p, ok := dl.(*permit); ok && p.b == b {
			res[i].Validity, res[i].Err = p.refreshLocked(ttl)
			continue
		}
		l, ok := dl.(*lease)
		if !ok || l.b != b {
			res[i].Err = fmt.Errorf("memlock: lease %T is not from this backend", dl)
			continue
		}
		res[i].Validity, res[i].Err = l.refreshLocked(ttl)
	}
	return res
}

type lease struct {
	b        *Backend
	e        *entry
	token    uint64
	owner    string
	since    time.Time
	validity driver.Validity
	onLost   func(error)
	shared   bool
	expires  time.Time   // a reader's expiry (a writer's is its entry's)
	timer    *time.Timer // fires at a reader's expires
}

// armReaderLocked sets the expiry of r, a reader, to now+ttl.
func (b *Backend) armReaderLocked(r *lease, now time.Time, ttl time.Duration) {
	r.expires = now.Add(ttl)
	if r.timer == nil {
		r.timer = time.AfterFunc(ttl, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.expireLocked(r.e, time.Now())
		})
	} else {
		r.timer.Reset(ttl)
	}
}

func (l *lease) Token() uint64             { return l.token }
func (l *lease) Validity() driver.Validity { return l.validity }

func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := ctx.Err(); err != nil {
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	return l.refreshLocked(ttl)
}

func (l *lease) refreshLocked(ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	now := time.Now()
	l.b.expireLocked(l.e, now)
	if !l.heldLocked() {
		return driver.Validity{}, fmt.Errorf("%w: token %d no longer holds %q", driver.ErrLockLost, l.token, l.e.key)
	}
	if l.shared {
		l.b.armReaderLocked(l, now, ttl)
	} else {
		l.b.armLocked(l.e, now, ttl)
	}
	return driver.Validity{Sent: now, TTL: ttl}, nil
}

// SetOwner implements driver.OwnerSetter.
func (l *lease) SetOwner(ctx context.Context, owner string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	l.b.expireLocked(l.e, time.Now())
	if !l.heldLocked() {
		return fmt.Errorf("%w: token %d no longer holds %q", driver.ErrLockLost, l.token, l.e.key)
	}
	if l.owner != owner {
		l.owner = owner
		if !l.shared { // watchers watch the exclusive holder
			l.e.notifyLocked()
		}
	}
	return nil
}

func (l *lease) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	l.b.expireLocked(l.e, time.Now())
	if !l.b.freeLocked(l.e, l) {
		return fmt.Errorf("%w: token %d no longer holds %q", driver.ErrLockLost, l.token, l.e.key)
	}
	return nil
}
