package memlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Semaphores = (*Backend)(nil)
	_ driver.SlotLease  = (*permit)(nil)
)

// semaphore is the state of the semaphore kept at an entry's key. Its
// permits take their tokens from the entry's counter, which locks of the
// key share. All of it is guarded by Backend.mu.
type semaphore struct {
	limit   int // 0 when no permit is live or awaited
	live    map[*permit]struct{}
	slots   map[int]*permit // the live permits that have a slot
	waiters []*permitWaiter // in arrival order
}

// permitWaiter is an AcquirePermit waiting for its turn. The permit is
// handed to it under Backend.mu, and ready closed, by whoever gives a
// permit back while it is first in line.
type permitWaiter struct {
	sem   driver.Semaphore
	opts  driver.AcquireOptions
	got   *permit
	ready chan struct{}
}

// AcquirePermit implements driver.Semaphores. Waiters are served in
// arrival order: a permit given back (released, expired) goes to the
// first waiter at once, under the Backend's lock, and wakes it alone.
func (b *Backend) AcquirePermit(ctx context.Context, key string, sem driver.Semaphore, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckPermit(ctx, key, sem, opts); err != nil {
		return nil, err
	}
	if b.closing.Err() != nil {
		return nil, ErrClosed
	}
	b.mu.Lock()
	e := b.entryLocked(key)
	s := e.semLocked()
	b.expirePermitsLocked(e, time.Now())
	if s.limit != 0 && s.limit != sem.Limit {
		stored := s.limit
		b.mu.Unlock()
		return nil, &driver.LimitError{Stored: stored, Asked: sem.Limit}
	}
	s.limit = sem.Limit
	if len(s.live) < s.limit && len(s.waiters) == 0 {
		p := b.grantPermitLocked(e, sem, opts)
		b.mu.Unlock()
		return p, nil
	}
	if !opts.Wait {
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: memlock: all %d permits held", driver.ErrNotAcquired, sem.Limit)
	}
	w := &permitWaiter{sem: sem, opts: opts, ready: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	b.mu.Unlock()

	select {
	case <-w.ready:
		return w.got, nil
	case <-ctx.Done():
	case <-b.closing.Done():
	}
	b.mu.Lock()
	if w.got != nil {
		// Granted as it left: the permit goes back, to the next waiter.
		b.freePermitLocked(w.got)
	} else {
		s.waiters = slices.DeleteFunc(s.waiters, func(x *permitWaiter) bool { return x == w })
		s.forgetLimitLocked()
	}
	b.mu.Unlock()
	if ctx.Err() != nil {
		return nil, driver.Canceled(ctx)
	}
	return nil, ErrClosed
}

func (e *entry) semLocked() *semaphore {
	if e.sem == nil {
		e.sem = &semaphore{live: map[*permit]struct{}{}, slots: map[int]*permit{}}
	}
	return e.sem
}

// forgetLimitLocked drops the stored limit once no permit is live or
// awaited: the next asker sets it.
func (s *semaphore) forgetLimitLocked() {
	if len(s.live) == 0 && len(s.waiters) == 0 {
		s.limit = 0
	}
}

// grantPermitLocked makes a new live permit of e's semaphore.
func (b *Backend) grantPermitLocked(e *entry, sem driver.Semaphore, opts driver.AcquireOptions) *permit {
	s := e.sem
	now := time.Now()
	e.token++
	p := &permit{b: b, e: e, token: e.token, slot: -1, owner: opts.Owner, onLost: opts.OnLost,
		since: now, validity: driver.Validity{Sent: now, TTL: opts.TTL}, expires: now.Add(opts.TTL)}
	if sem.Slots {
		// Fewer than limit permits are live, so a slot below it is free.
		for p.slot = 0; s.slots[p.slot] != nil; p.slot++ {
		}
		s.slots[p.slot] = p
	}
	s.live[p] = struct{}{}
	p.timer = time.AfterFunc(opts.TTL, func() { b.onPermitTimer(p) })
	return p
}

func (b *Backend) onPermitTimer(p *permit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, live := p.e.sem.live[p]; live && time.Now().Before(p.expires) {
		p.timer.Reset(time.Until(p.expires))
		return
	}
	b.expirePermitsLocked(p.e, time.Now())
}

// expirePermitsLocked drops e's expired permits silently, handing them to
// the waiters.
func (b *Backend) expirePermitsLocked(e *entry, now time.Time) {
	if e.sem == nil {
		return
	}
	for p := range e.sem.live {
		if !now.Before(p.expires) {
			b.freePermitLocked(p)
		}
	}
}

// freePermitLocked gives p back, if it is live, to the first waiters.
func (b *Backend) freePermitLocked(p *permit) bool {
	s := p.e.sem
	if _, live := s.live[p]; !live {
		return false
	}
	delete(s.live, p)
	if p.slot >= 0 {
		delete(s.slots, p.slot)
	}
	p.timer.Stop()
	for len(s.waiters) > 0 && len(s.live) < s.limit {
		w := s.waiters[0]
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
		w.got = b.grantPermitLocked(p.e, w.sem, w.opts)
		close(w.ready)
	}
	s.forgetLimitLocked()
	return true
}

// Permits implements driver.Semaphores.
func (b *Backend) Permits(_ context.Context, key string) (driver.PermitState, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.PermitState{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.keys[key]
	if e == nil || e.sem == nil {
		return driver.PermitState{}, nil
	}
	hs := b.appendPermitsLocked(nil, e, time.Now())
	slices.SortFunc(hs, func(a, b driver.Holder) int { return cmpUint(a.Token, b.Token) })
	return driver.PermitState{Limit: e.sem.limit, Holders: hs, Waiting: len(e.sem.waiters)}, nil
}

// appendPermitsLocked appends the live permits of e's semaphore to hs, in
// no order, after dropping those expired at now.
func (b *Backend) appendPermitsLocked(hs []driver.Holder, e *entry, now time.Time) []driver.Holder {
	if e.sem == nil {
		return hs
	}
	b.expirePermitsLocked(e, now)
	for p := range e.sem.live {
		h := driver.Holder{Key: e.key, Token: p.token, Owner: p.owner, Since: p.since, Expires: p.expires}
		if p.slot >= 0 {
			h.Slot, h.HasSlot = p.slot, true
		}
		hs = append(hs, h)
	}
	return hs
}

// revokePermitsLocked drops every live permit of e's semaphore, telling
// each holder through its OnLost before its permit goes to a waiter, and
// reports whether there was one.
func (b *Backend) revokePermitsLocked(e *entry) bool {
	if e.sem == nil || len(e.sem.live) == 0 {
		return false
	}
	live := make([]*permit, 0, len(e.sem.live))
	for p := range e.sem.live {
		live = append(live, p)
	}
	for _, p := range live {
		if p.onLost != nil {
			p.onLost(fmt.Errorf("%w: revoked by the service", driver.ErrLockLost))
		}
	}
	for _, p := range live {
		b.freePermitLocked(p)
	}
	return true
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// permit is a lease of one of a semaphore's permits.
type permit struct {
	b        *Backend
	e        *entry
	token    uint64
	slot     int // -1: none asked
	owner    string
	since    time.Time
	validity driver.Validity
	onLost   func(error)
	expires  time.Time   // guarded by Backend.mu
	timer    *time.Timer // fires at expires, to give the permit back
}

func (p *permit) Token() uint64             { return p.token }
func (p *permit) Validity() driver.Validity { return p.validity }
func (p *permit) Slot() int                 { return p.slot }

// liveLocked reports whether p is still held, after dropping it if it
// has expired.
func (p *permit) liveLocked(now time.Time) error {
	p.b.expirePermitsLocked(p.e, now)
	if _, live := p.e.sem.live[p]; !live {
		return fmt.Errorf("%w: token %d no longer holds a permit of %q", driver.ErrLockLost, p.token, p.e.key)
	}
	return nil
}

func (p *permit) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := ctx.Err(); err != nil {
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	return p.refreshLocked(ttl)
}

func (p *permit) refreshLocked(ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	now := time.Now()
	if err := p.liveLocked(now); err != nil {
		return driver.Validity{}, err
	}
	p.expires = now.Add(ttl)
	p.timer.Reset(ttl)
	return driver.Validity{Sent: now, TTL: ttl}, nil
}

func (p *permit) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if err := p.liveLocked(time.Now()); err != nil {
		return err
	}
	p.b.freePermitLocked(p)
	return nil
}
