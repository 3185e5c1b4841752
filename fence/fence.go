package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrStaleToken means a write carried a token lower than one the resource
// has already admitted: its lock was lost and someone newer has written.
var ErrStaleToken = errors.New("fence: stale token")

// StaleTokenError is the error returned for a refused token; it matches
// ErrStaleToken.
type StaleTokenError struct {
	Resource string
	Token    uint64 // the refused token
	Highest  uint64 // the highest token admitted for Resource
}

// Error implements error.
func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fence: stale token %d for %q: %d already admitted", e.Token, e.Resource, e.Highest)
}

// Is reports whether target is ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// Register remembers, per resource, the highest token admitted. It counts
// the tokens it refuses (distlock.fence.rejections, distlock.guard
// "fence.Register"; see WithMeterProvider). It is safe for concurrent use;
// the zero value is ready to use, and counts on the global provider. A
// Register must not be copied after first use.
type Register struct {
	mu       sync.Mutex
	highest  map[string]uint64
	rejected *Counter // made at the first refusal when NewRegister did not
}

// NewRegister returns an empty Register configured by opts.
func NewRegister(opts ...Option) *Register {
	return &Register{rejected: NewCounter(registerGuard, opts...)}
}

// registerGuard is the distlock.guard of a Register's refusals.
const registerGuard = "fence.Register"

// Admit admits token for resource if it is at least the highest admitted so
// far, and records it; otherwise it returns a *StaleTokenError. Token 0 is
// never admitted: no grant has it.
func (r *Register) Admit(resource string, token uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.admitLocked(resource, token)
}

// Do admits token for resource and runs write while no other Admit or Do on
// this Register can run, so that the check and the write are one step. If
// write fails, the token is still recorded as admitted.
func (r *Register) Do(resource string, token uint64, write func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.admitLocked(resource, token); err != nil {
		return err
	}
	return write()
}

// Highest returns the highest token admitted for resource, 0 if none.
func (r *Register) Highest(resource string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest[resource]
}

func (r *Register) admitLocked(resource string, token uint64) error {
	h := r.highest[resource]
	if token == 0 || token < h {
		if r.rejected == nil {
			r.rejected = NewCounter(registerGuard)
		}
		r.rejected.Rejected(context.Background())
		return &StaleTokenError{Resource: resource, Token: token, Highest: h}
	}
	if r.highest == nil {
		r.highest = map[string]uint64{}
	}
	r.highest[resource] = token
	return nil
}
