package driver_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/distlocktest"
	"github.com/distlock/distlock/driver"
)

// This file is a backend written from package driver's documentation alone:
// an in-process lock service (a map of keys guarded by one mutex) and its
// clients. It takes no Queue and waits with driver.Wait on a per-key
// broadcast channel, so that the conformance suite checks what the
// documentation promises of the kit rather than one backend's habits. A release
// wakes every waiter and one wins: a herd, which costs little within one
// process; a backend whose tries are requests takes a Queue turn first.

// errMapClosed is the backend's ErrClosed.
var errMapClosed = driver.ClosedError("maplock")

// mapService is the lock service: what every process shares. Grants expire by
// their TTL when they are next looked at; nothing runs in the background.
type mapService struct {
	mu   sync.Mutex
	keys map[string]*mapEntry
}

// mapEntry is one key. It outlives its grants, and stays in the map for good:
// last is the key's token counter, which must keep increasing across them.
type mapEntry struct {
	last    uint64
	holder  *mapLease // nil when free
	expires time.Time
	wake    chan struct{} // closed when the key is freed; nil while nobody waits
}

func newMapService() *mapService {
	return &mapService{keys: make(map[string]*mapEntry)}
}

// free ends e's grant and wakes its waiters. Called with s.mu held.
func (e *mapEntry) free() {
	if e.holder != nil {
		delete(e.holder.b.leases, e.holder)
	}
	e.holder = nil
	if e.wake != nil {
		close(e.wake)
		e.wake = nil
	}
}

// revoke drops key's grant, as a service does when a lease expires on its
// side, and reports the loss to the holder.
func (s *mapService) revoke(key string) {
	s.mu.Lock()
	var lost *mapLease
	if e := s.keys[key]; e != nil && e.holder != nil {
		lost = e.holder
		e.free()
	}
	s.mu.Unlock()
	if lost != nil && lost.onLost != nil {
		lost.onLost(fmt.Errorf("maplock: grant revoked: %w", driver.ErrLockLost))
	}
}

// mapBackend is one process's client of a mapService.
type mapBackend struct {
	s       *mapService
	tracker *driver.Tracker
	closing chan struct{}
	leases  map[*mapLease]struct{} // guarded by s.mu
}

var (
	_ driver.Backend = (*mapBackend)(nil)
	_ driver.Lease   = (*mapLease)(nil)
)

func (s *mapService) backend() *mapBackend {
	return &mapBackend{
		s:       s,
		tracker: driver.NewTracker(errMapClosed),
		closing: make(chan struct{}),
		leases:  make(map[*mapLease]struct{}),
	}
}

// Acquire implements driver.Backend.
func (b *mapBackend) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	if !b.tracker.Enter() {
		return nil, errMapClosed
	}
	defer b.tracker.Leave()
	try := func(ctx context.Context, woke bool) (*mapLease, *driver.Held, error) {
		return b.try(key, opts)
	}
	if !opts.Wait {
		l, held, err := try(ctx, false)
		switch {
		case err != nil:
			return nil, err
		case held != nil:
			return nil, fmt.Errorf("maplock: key held: %w", driver.ErrNotAcquired)
		}
		return l, nil
	}
	l, err := driver.Wait(ctx, driver.Waiter[*mapLease]{
		Try:     try,
		Closing: b.closing,
		Closed:  func() error { return errMapClosed },
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// try asks the service for key once.
func (b *mapBackend) try(key string, opts driver.AcquireOptions) (*mapLease, *driver.Held, error) {
	sent := time.Now()
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if err := b.tracker.CheckOpen(); err != nil {
		return nil, nil, err
	}
	e := b.s.keys[key]
	if e == nil {
		e = &mapEntry{}
		b.s.keys[key] = e
	}
	now := time.Now()
	if e.holder != nil && now.Before(e.expires) {
		if e.wake == nil {
			e.wake = make(chan struct{})
		}
		return nil, &driver.Held{Wake: e.wake, RetryIn: e.expires.Sub(now)}, nil
	}
	e.free() // a grant that expired silently
	e.last++
	l := &mapLease{b: b, key: key, token: e.last, onLost: opts.OnLost,
		validity: driver.Validity{Sent: sent, TTL: opts.TTL}}
	e.holder, e.expires = l, now.Add(opts.TTL)
	b.leases[l] = struct{}{}
	return l, nil, nil
}

// Close ends the client's session: its grants are freed, as a service frees
// those of a client that closed its connection, and Acquires in progress end
// with errMapClosed.
func (b *mapBackend) Close() error {
	b.s.mu.Lock()
	if !b.tracker.Shut() {
		b.s.mu.Unlock()
		return nil
	}
	close(b.closing)
	var lost []*mapLease
	for l := range b.leases {
		lost = append(lost, l)
		b.s.keys[l.key].free()
	}
	b.s.mu.Unlock()
	for _, l := range lost {
		if l.onLost != nil {
			l.onLost(fmt.Errorf("maplock: backend closed: %w", driver.ErrLockLost))
		}
	}
	b.tracker.Wait()
	return nil
}

// mapLease is one grant.
type mapLease struct {
	b        *mapBackend
	key      string
	token    uint64
	validity driver.Validity
	onLost   func(error)
}

func (l *mapLease) Token() uint64             { return l.token }
func (l *mapLease) Validity() driver.Validity { return l.validity }

// held returns l's entry if l still holds it. Called with l.b.s.mu held.
func (l *mapLease) held(now time.Time) (*mapEntry, error) {
	e := l.b.s.keys[l.key]
	if e.holder != l || !now.Before(e.expires) {
		return nil, fmt.Errorf("maplock: grant gone: %w", driver.ErrLockLost)
	}
	return e, nil
}

// Refresh implements driver.Lease.
func (l *mapLease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	sent := time.Now()
	l.b.s.mu.Lock()
	defer l.b.s.mu.Unlock()
	now := time.Now()
	e, err := l.held(now)
	if err != nil {
		return driver.Validity{}, err
	}
	e.expires = now.Add(ttl)
	return driver.Validity{Sent: sent, TTL: ttl}, nil
}

// Release implements driver.Lease.
func (l *mapLease) Release(ctx context.Context) error {
	l.b.s.mu.Lock()
	defer l.b.s.mu.Unlock()
	e, err := l.held(time.Now())
	if err != nil {
		return err
	}
	e.free()
	return nil
}

// TestExampleBackendConformance runs the suite twice: with revoke, and
// without it, where grants lapse by their TTL, the silent expiry that a
// revoke would stand in for.
func TestExampleBackendConformance(t *testing.T) {
	for _, tc := range []struct {
		name   string
		revoke bool
	}{
		{"Lapse", false},
		{"Revoke", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newMapService()
			var opts []distlocktest.Option
			if tc.revoke {
				opts = append(opts, distlocktest.WithRevoke(func(t *testing.T, key string) { s.revoke(key) }))
			}
			distlocktest.Run(t, func(t *testing.T) driver.Backend {
				b := s.backend()
				t.Cleanup(func() { b.Close() })
				return b
			}, opts...)
		})
	}
}
