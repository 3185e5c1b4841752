package distlocktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Backend        = (*Faulty)(nil)
	_ driver.BatchRefresher = (*Faulty)(nil)
	_ driver.Lister         = (*Faulty)(nil)
	_ driver.HolderReader   = (*Faulty)(nil)
	_ driver.HolderWatcher  = (*Faulty)(nil)
	_ driver.Semaphores     = (*Faulty)(nil)
	_ driver.SharedLocks    = (*Faulty)(nil)
	_ driver.OwnerSetter    = (*faultyLease)(nil)
	_ driver.SlotLease      = faultySlotLease{}
)

// Faulty wraps a Backend and can make refreshes fail, as when the holder is
// cut off from the service while the service goes on (its leases then lapse
// by their TTL). Acquire and Release pass through, so that the Client's
// own clean-up still reaches the service, and so do the optional
// interfaces (Lister, HolderReader, HolderWatcher, Semaphores, SharedLocks, a lease's
// OwnerSetter and SlotLease),
// with an error matching errors.ErrUnsupported when the wrapped backend
// lacks one; a lease's SetOwner fails like a refresh while its key is
// partitioned. It is safe for concurrent use.
type Faulty struct {
	driver.Backend

	mu   sync.Mutex
	all  bool
	keys map[string]bool
	hits int
}

// NewFaulty wraps b; no fault is active.
func NewFaulty(b driver.Backend) *Faulty { return &Faulty{Backend: b, keys: map[string]bool{}} }

// Partition makes refreshes of the given keys (of every key, with none) fail
// with an error matching distlock.ErrUnavailable until Heal.
func (f *Faulty) Partition(keys ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(keys) == 0 {
		f.all = true
	}
	for _, k := range keys {
		f.keys[k] = true
	}
}

// Heal ends every fault.
func (f *Faulty) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.all, f.keys = false, map[string]bool{}
}

// Refused returns how many refreshes the faults have refused.
func (f *Faulty) Refused() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits
}

func (f *Faulty) cut(key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.all || f.keys[key] {
		f.hits++
		return fmt.Errorf("%w: distlocktest: partitioned from the service", distlock.ErrUnavailable)
	}
	return nil
}

// Acquire implements driver.Backend.
func (f *Faulty) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	l, err := f.Backend.Acquire(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return &faultyLease{Lease: l, f: f, key: key}, nil
}

// AcquirePermit implements driver.Semaphores.
func (f *Faulty) AcquirePermit(ctx context.Context, key string, sem driver.Semaphore, opts driver.AcquireOptions) (driver.Lease, error) {
	s, ok := f.Backend.(driver.Semaphores)
	if !ok {
		return nil, fmt.Errorf("distlocktest: %T cannot grant permits: %w", f.Backend, errors.ErrUnsupported)
	}
	l, err := s.AcquirePermit(ctx, key, sem, opts)
	if err != nil {
		return nil, err
	}
	fl := &faultyLease{Lease: l, f: f, key: key}
	if _, ok := l.(driver.SlotLease); ok {
		return faultySlotLease{fl}, nil
	}
	return fl, nil
}

// AcquireShared implements driver.SharedLocks.
func (f *Faulty) AcquireShared(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	s, ok := f.Backend.(driver.SharedLocks)
	if !ok {
		return nil, fmt.Errorf("distlocktest: %T cannot grant shared locks: %w", f.Backend, errors.ErrUnsupported)
	}
	l, err := s.AcquireShared(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	return &faultyLease{Lease: l, f: f, key: key}, nil
}

// Readers implements driver.SharedLocks.
func (f *Faulty) Readers(ctx context.Context, key string) ([]driver.Holder, error) {
	s, ok := f.Backend.(driver.SharedLocks)
	if !ok {
		return nil, fmt.Errorf("distlocktest: %T cannot grant shared locks: %w", f.Backend, errors.ErrUnsupported)
	}
	return s.Readers(ctx, key)
}

// Permits implements driver.Semaphores.
func (f *Faulty) Permits(ctx context.Context, key string) (driver.PermitState, error) {
	s, ok := f.Backend.(driver.Semaphores)
	if !ok {
		return driver.PermitState{}, fmt.Errorf("distlocktest: %T cannot grant permits: %w", f.Backend, errors.ErrUnsupported)
	}
	return s.Permits(ctx, key)
}

// RefreshAll implements driver.BatchRefresher, passing unfaulted leases to
// the wrapped backend in one batch when it can batch.
func (f *Faulty) RefreshAll(ctx context.Context, leases []driver.Lease, ttl time.Duration) []driver.RefreshResult {
	res := make([]driver.RefreshResult, len(leases))
	inner, idx := []driver.Lease{}, []int{}
	for i, l := range leases {
		fl := asFaulty(l)
		if err := f.cut(fl.key); err != nil {
			res[i].Err = err
			continue
		}
		inner, idx = append(inner, fl.Lease), append(idx, i)
	}
	if br, ok := f.Backend.(driver.BatchRefresher); ok && len(inner) > 0 {
		for j, r := range br.RefreshAll(ctx, inner, ttl) {
			res[idx[j]] = r
		}
		return res
	}
	for j, l := range inner {
		res[idx[j]].Validity, res[idx[j]].Err = l.Refresh(ctx, ttl)
	}
	return res
}

type faultyLease struct {
	driver.Lease
	f   *Faulty
	key string
}

// asFaulty returns the faultyLease that l, one of Faulty's leases, is.
func asFaulty(l driver.Lease) *faultyLease {
	if sl, ok := l.(faultySlotLease); ok {
		return sl.faultyLease
	}
	return l.(*faultyLease)
}

// faultySlotLease is a faultyLease over a lease with a slot: only such a
// lease is a driver.SlotLease, as the one it wraps is.
type faultySlotLease struct{ *faultyLease }

// Slot implements driver.SlotLease: the wrapped lease's slot.
func (l faultySlotLease) Slot() int { return l.Lease.(driver.SlotLease).Slot() }

func (l *faultyLease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := l.f.cut(l.key); err != nil {
		return driver.Validity{}, err
	}
	return l.Lease.Refresh(ctx, ttl)
}

// List implements driver.Lister.
func (f *Faulty) List(ctx context.Context, prefix string) ([]driver.Holder, error) {
	l, ok := f.Backend.(driver.Lister)
	if !ok {
		return nil, fmt.Errorf("distlocktest: %T cannot list: %w", f.Backend, errors.ErrUnsupported)
	}
	return l.List(ctx, prefix)
}

// Holder implements driver.HolderReader.
func (f *Faulty) Holder(ctx context.Context, key string) (driver.Holder, bool, error) {
	r, ok := f.Backend.(driver.HolderReader)
	if !ok {
		return driver.Holder{}, false, fmt.Errorf("distlocktest: %T cannot read a holder: %w", f.Backend, errors.ErrUnsupported)
	}
	return r.Holder(ctx, key)
}

// WatchHolder implements driver.HolderWatcher.
func (f *Faulty) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	w, ok := f.Backend.(driver.HolderWatcher)
	if !ok {
		return nil, fmt.Errorf("distlocktest: %T cannot watch a holder: %w", f.Backend, errors.ErrUnsupported)
	}
	return w.WatchHolder(ctx, key)
}

func (l *faultyLease) SetOwner(ctx context.Context, owner string) error {
	if err := l.f.cut(l.key); err != nil {
		return err
	}
	s, ok := l.Lease.(driver.OwnerSetter)
	if !ok {
		return fmt.Errorf("distlocktest: %T cannot change its owner: %w", l.Lease, errors.ErrUnsupported)
	}
	return s.SetOwner(ctx, owner)
}
