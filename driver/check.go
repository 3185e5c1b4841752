package driver

import (
	"context"
	"fmt"
	"time"
)

// CheckAcquire checks what every Backend.Acquire is given, in the same order
// and with the same errors on every backend: the key (distlock.ValidateKey:
// an error matching distlock.ErrInvalidKey), the TTL (CheckTTL: an error
// matching distlock.ErrInvalidOption), then ctx (Canceled, if it has already
// ended). A backend whose grants have no time bound checks the TTL all the
// same: the Client always sends one, and a value refused by one backend is
// refused by all.
func CheckAcquire(ctx context.Context, key string, opts AcquireOptions) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := CheckTTL(opts.TTL); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return Canceled(ctx)
	}
	return nil
}

// CheckTTL refuses a lease duration that is not positive or exceeds
// distlock.MaxTTL, with an error matching distlock.ErrInvalidOption. Backends
// check the ttl given to Refresh with it too.
func CheckTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > MaxTTL {
		return fmt.Errorf("%w: TTL %v is not in (0, %v]", ErrInvalidOption, ttl, MaxTTL)
	}
	return nil
}

// Canceled is the error of an acquire that ctx ended, before or while it
// waited: it matches distlock.ErrNotAcquired, ctx.Err() and, when ctx was
// cancelled with one, its cause (the Client's ErrClosed, for example).
func Canceled(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w: %w", ErrNotAcquired, err, cause)
	}
	return fmt.Errorf("%w: %w", ErrNotAcquired, err)
}
