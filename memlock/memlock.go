package memlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock"
)

var (
	_ distlock.Backend        = (*Backend)(nil)
	_ distlock.BatchRefresher = (*Backend)(nil)
	_ distlock.Lister         = (*Backend)(nil)
)

// Backend is the in-process lock service. The zero value is not usable; call
// New. It is safe for concurrent use.
type Backend struct {
	mu   sync.Mutex
	keys map[string]*entry
}

type entry struct {
	key     string
	token   uint64 // last token granted; never reset
	holder  *lease // nil when free
	expires time.Time
	timer   *time.Timer // fires at expires, to hand the key to a waiter
	waiters []*waiter   // FIFO
}

type waiter struct {
	opts    distlock.AcquireOptions
	granted chan *lease // buffered: the hand-off never blocks
}

// New returns an empty lock service.
func New() *Backend { return &Backend{keys: map[string]*entry{}} }

// Acquire implements distlock.Backend. Waiters are served in arrival order;
// a release or an expiry hands the key straight to the first one.
func (b *Backend) Acquire(ctx context.Context, key string, opts distlock.AcquireOptions) (distlock.Lease, error) {
	if err := distlock.ValidateKey(key); err != nil {
		return nil, err
	}
	if opts.TTL <= 0 {
		return nil, fmt.Errorf("%w: TTL %v is not positive", distlock.ErrInvalidOption, opts.TTL)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	e := b.entryLocked(key)
	b.expireLocked(e, time.Now())
	if e.holder == nil && len(e.waiters) == 0 {
		l := b.grantLocked(e, opts)
		b.mu.Unlock()
		return l, nil
	}
	if !opts.Wait {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: held", distlock.ErrNotAcquired)
	}
	w := &waiter{opts: opts, granted: make(chan *lease, 1)}
	e.waiters = append(e.waiters, w)
	b.mu.Unlock()

	select {
	case l := <-w.granted:
		return l, nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := slices.Index(e.waiters, w); i >= 0 {
		e.waiters = slices.Delete(e.waiters, i, i+1)
	} else {
		// Granted while we gave up: pass it on.
		l := <-w.granted
		b.freeLocked(e, l)
	}
	return nil, ctx.Err()
}

func (b *Backend) entryLocked(key string) *entry {
	e := b.keys[key]
	if e == nil {
		e = &entry{key: key}
		b.keys[key] = e
	}
	return e
}

// grantLocked makes a new lease the holder of e.
func (b *Backend) grantLocked(e *entry, opts distlock.AcquireOptions) *lease {
	now := time.Now()
	e.token++
	l := &lease{b: b, e: e, token: e.token, owner: opts.Owner, onLost: opts.OnLost,
		since: now, validity: distlock.Validity{Sent: now, TTL: opts.TTL}}
	e.holder = l
	b.armLocked(e, now, opts.TTL)
	return l
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

// expireLocked drops an expired holder silently and serves the waiters.
func (b *Backend) expireLocked(e *entry, now time.Time) {
	if e.holder != nil && !now.Before(e.expires) {
		b.freeLocked(e, e.holder)
	}
}

// freeLocked removes l as holder of e, if it is, and hands e to the first
// waiter.
func (b *Backend) freeLocked(e *entry, l *lease) bool {
	if e.holder != l {
		return false
	}
	e.holder = nil
	e.timer.Stop()
	if len(e.waiters) > 0 {
		w := e.waiters[0]
		e.waiters = slices.Delete(e.waiters, 0, 1)
		w.granted <- b.grantLocked(e, w.opts)
	}
	return true
}

// Revoke drops the current grant of key, as a session service does when the
// holder's session ends, and tells the holder through its OnLost callback
// before anyone else can be granted the key. It reports whether there was a
// grant to drop.
func (b *Backend) Revoke(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.keys[key]
	if e == nil || e.holder == nil {
		return false
	}
	if l := e.holder; l.onLost != nil {
		l.onLost(fmt.Errorf("%w: revoked by the service", distlock.ErrLockLost))
	}
	b.freeLocked(e, e.holder)
	return true
}

// List implements distlock.Lister.
func (b *Backend) List(_ context.Context, prefix string) ([]distlock.Holder, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	var hs []distlock.Holder
	for k, e := range b.keys {
		b.expireLocked(e, now)
		if e.holder != nil && strings.HasPrefix(k, prefix) {
			hs = append(hs, distlock.Holder{Key: k, Token: e.holder.token, Owner: e.holder.owner,
				Since: e.holder.since, Expires: e.expires})
		}
	}
	slices.SortFunc(hs, func(a, b distlock.Holder) int { return strings.Compare(a.Key, b.Key) })
	return hs, nil
}

// RefreshAll implements distlock.BatchRefresher.
func (b *Backend) RefreshAll(_ context.Context, leases []distlock.Lease, ttl time.Duration) []distlock.RefreshResult {
	res := make([]distlock.RefreshResult, len(leases))
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, dl := range leases {
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
	validity distlock.Validity
	onLost   func(error)
}

func (l *lease) Token() uint64               { return l.token }
func (l *lease) Validity() distlock.Validity { return l.validity }

func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (distlock.Validity, error) {
	if err := ctx.Err(); err != nil {
		return distlock.Validity{}, fmt.Errorf("%w: %w", distlock.ErrUnavailable, err)
	}
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	return l.refreshLocked(ttl)
}

func (l *lease) refreshLocked(ttl time.Duration) (distlock.Validity, error) {
	if ttl <= 0 {
		return distlock.Validity{}, fmt.Errorf("%w: TTL %v is not positive", distlock.ErrInvalidOption, ttl)
	}
	now := time.Now()
	l.b.expireLocked(l.e, now)
	if l.e.holder != l {
		return distlock.Validity{}, fmt.Errorf("%w: token %d no longer holds %q", distlock.ErrLockLost, l.token, l.e.key)
	}
	l.b.armLocked(l.e, now, ttl)
	return distlock.Validity{Sent: now, TTL: ttl}, nil
}

func (l *lease) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", distlock.ErrUnavailable, err)
	}
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	l.b.expireLocked(l.e, time.Now())
	if !l.b.freeLocked(l.e, l) {
		return fmt.Errorf("%w: token %d no longer holds %q", distlock.ErrLockLost, l.token, l.e.key)
	}
	return nil
}
