package driver

import (
	"context"
	"fmt"
)

// MaxPermits is the largest limit of a semaphore.
const MaxPermits = 1 << 16

// Semaphore describes the counting semaphore a permit is asked of.
type Semaphore struct {
	// Limit is how many permits the semaphore grants at once, in
	// [1, MaxPermits]. The first holder or waiter stores it with the
	// semaphore where the backend can; an asker naming another limit is
	// then refused with a *LimitError.
	Limit int

	// Slots asks for a permit that names its slot, an integer in
	// [0, Limit) that no other live permit of the semaphore has. The
	// lease then implements SlotLease.
	Slots bool
}

// UnknownLimit is the limit Permits reports for a semaphore whose layout
// does not store one (see "Semaphores" in the package documentation).
const UnknownLimit = -1

// Semaphores is implemented by backends that grant permits of counting
// semaphores (see "Semaphores" in the package documentation). The Client
// refuses permits, with an error matching errors.ErrUnsupported, on a
// backend that lacks it.
type Semaphores interface {
	// AcquirePermit asks for one of sem.Limit permits of the semaphore
	// kept at key. It is Backend.Acquire for a permit: opts mean what
	// they mean there (TTL, Wait, Owner, OnLost; Election is ignored),
	// and it checks its input with CheckPermit first. A semaphore whose
	// stored limit is not sem.Limit refuses it with a *LimitError, and
	// grants nothing. With opts.Wait, waiters are served in arrival
	// order, as the package documentation's Semaphores says.
	AcquirePermit(ctx context.Context, key string, sem Semaphore, opts AcquireOptions) (Lease, error)

	// Permits returns the state of the semaphore at key as the service
	// has it now.
	Permits(ctx context.Context, key string) (PermitState, error)
}

// PermitState is the state of a semaphore (Semaphores.Permits).
type PermitState struct {
	// Limit is the stored limit: 0 when nothing holds or awaits a permit
	// (then the semaphore stores no limit), UnknownLimit where the
	// backend's layout stores none.
	Limit int

	// Holders are the live permits, sorted by token. Each Holder's Key is
	// the semaphore's key, and its Slot and HasSlot are set for a permit
	// asked with Slots.
	Holders []Holder

	// Waiting is how many waiters have a place in the semaphore's line,
	// as the service keeps it (for a waiter lost with its process, until
	// its place lapses).
	Waiting int
}

// SlotLease is implemented by the leases of permits asked with
// Semaphore.Slots.
type SlotLease interface {
	// Slot is the permit's slot, in [0, Semaphore.Limit): no other live
	// permit of the semaphore has it.
	Slot() int
}

// LimitError is the error of a permit asked with a limit other than the
// one the semaphore stores. It matches ErrInvalidOption.
type LimitError struct {
	Stored int // the semaphore's limit
	Asked  int // the limit the permit named
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: the semaphore's limit is %d, not %d", ErrInvalidOption, e.Stored, e.Asked)
}

// Unwrap returns ErrInvalidOption.
func (e *LimitError) Unwrap() error { return ErrInvalidOption }

// CheckPermit checks what every Semaphores.AcquirePermit is given:
// CheckAcquire's checks, then the limit (an error matching
// ErrInvalidOption).
func CheckPermit(ctx context.Context, key string, sem Semaphore, opts AcquireOptions) error {
	if err := CheckAcquire(ctx, key, opts); err != nil {
		return err
	}
	if sem.Limit < 1 || sem.Limit > MaxPermits {
		return fmt.Errorf("%w: limit %d is not in [1, %d]", ErrInvalidOption, sem.Limit, MaxPermits)
	}
	return nil
}
