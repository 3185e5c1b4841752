//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// permit is a held slot of a semaphore: an exclusive flock on its slot
// file.
type permit struct {
	b        *Backend
	key      string
	name     string
	path     string // the slot file
	slot     int    // -1: not asked with Slots
	token    uint64
	since    time.Time
	validity driver.Validity

	mu sync.Mutex
	f  *os.File // nil once released or found lost
}

func (p *permit) Token() uint64             { return p.token }
func (p *permit) Validity() driver.Validity { return p.validity }

// Slot returns the permit's slot, or -1 for a permit not asked with
// Semaphore.Slots.
func (p *permit) Slot() int { return p.slot }

// Key returns the semaphore's key.
func (p *permit) Key() string { return p.key }

// Refresh checks that the permit is still held: not released, its slot
// file neither removed nor replaced. It keeps the slot file from
// age-based cleaners as a lock's Refresh keeps its lock file.
func (p *permit) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	sent := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	fi, err := p.checkLocked()
	if err != nil {
		return driver.Validity{}, err
	}
	if time.Since(fi.ModTime()) > touchAfter {
		_ = touch(p.f)
	}
	return driver.Validity{Sent: sent}, nil
}

// checkLocked returns the status of the slot file, or an error matching
// ErrLockLost when the permit was released or its slot file removed or
// replaced (then the permit is dropped).
func (p *permit) checkLocked() (fs.FileInfo, error) {
	if p.f == nil {
		return nil, fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", driver.ErrLockLost, p.token, p.key)
	}
	fi, same, err := statSame(p.f, p.path)
	if err != nil {
		return nil, err
	}
	if !same {
		p.dropLocked()
		return nil, fmt.Errorf("%w: the slot file of %q was removed or replaced while token %d held it", driver.ErrLockLost, p.key, p.token)
	}
	return fi, nil
}

// Release gives the permit back: it unlocks and closes the slot file,
// which wakes the semaphore's waiters. Its entry in the state is purged
// by the next change of the state. It does not block.
func (p *permit) Release(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.checkLocked()
	if p.f != nil {
		p.dropLocked()
	}
	if err != nil && !errors.Is(err, driver.ErrLockLost) {
		return nil // the check failed without showing a loss; released
	}
	return err
}

func (p *permit) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropLocked()
}

func (p *permit) dropLocked() {
	unlockClose(p.f)
	p.f = nil
	p.b.permits.remove(p)
}

// permitSet holds the live permits of a Backend, for File.
type permitSet struct {
	mu sync.Mutex
	m  map[permitID]*permit
}

type permitID struct {
	name  string
	token uint64
}

func (s *permitSet) add(p *permit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[permitID]*permit{}
	}
	s.m[permitID{p.name, p.token}] = p
}

func (s *permitSet) remove(p *permit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, permitID{p.name, p.token})
}

func (s *permitSet) get(name string, token uint64) *permit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[permitID{name, token}]
}

// file returns a new descriptor of the slot file (see Backend.File).
func (p *permit) file() (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil {
		return nil, fmt.Errorf("%w: token %d of %q is not held (released, or found lost)", driver.ErrLockLost, p.token, p.key)
	}
	f, err := dupFile(p.f)
	if err != nil {
		return nil, fileErr("duplicate slot file descriptor", err)
	}
	return f, nil
}
