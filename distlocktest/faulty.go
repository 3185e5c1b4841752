package distlocktest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Backend        = (*Faulty)(nil)
	_ driver.BatchRefresher = (*Faulty)(nil)
)

// Faulty wraps a Backend and can make refreshes fail, as when the holder is
// cut off from the service while the service goes on (its leases then lapse
// by their TTL). Acquire and Release pass through, so that the Client's
// own clean-up still reaches the service. It is safe for concurrent use.
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

// RefreshAll implements driver.BatchRefresher, passing unfaulted leases to
// the wrapped backend in one batch when it can batch.
func (f *Faulty) RefreshAll(ctx context.Context, leases []driver.Lease, ttl time.Duration) []driver.RefreshResult {
	res := make([]driver.RefreshResult, len(leases))
	inner, idx := []driver.Lease{}, []int{}
	for i, l := range leases {
		fl := l.(*faultyLease)
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

func (l *faultyLease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := l.f.cut(l.key); err != nil {
		return driver.Validity{}, err
	}
	return l.Lease.Refresh(ctx, ttl)
}
