package distlock

import (
	"errors"
	"fmt"
)

// Errors returned by this package and by every Backend. Compare them with
// errors.Is: the errors actually returned wrap one or more of these with
// detail (the key, the backend's own error, the context's error).
var (
	// ErrNotAcquired means the lock was not granted: it was held by someone
	// else when trying once, or the context ended while waiting. In the
	// latter case the error also matches ctx.Err().
	ErrNotAcquired = errors.New("distlock: not acquired")

	// ErrLockLost means a grant is gone: its lease expired, the service
	// dropped it, or the local deadline passed without a confirmed refresh.
	// Work done under the lock after this point is not protected.
	ErrLockLost = errors.New("distlock: lock lost")

	// ErrNotHeld means the caller released or refreshed a lock it no longer
	// holds because it had already released it (a double release).
	ErrNotHeld = errors.New("distlock: lock not held")

	// ErrReleased is the cause of a lock context that ended because the lock
	// was released by its holder.
	ErrReleased = errors.New("distlock: lock released")

	// ErrInvalidKey means a key is empty, too long, not valid UTF-8, or has
	// control characters. See ValidateKey.
	ErrInvalidKey = errors.New("distlock: invalid key")

	// ErrInvalidOption means an option is out of range, for example a TTL
	// that is not positive or larger than MaxTTL.
	ErrInvalidOption = errors.New("distlock: invalid option")

	// ErrUnavailable means the lock service could not be reached or failed
	// in a way worth retrying. Backends wrap their transient errors with it;
	// the Client retries them according to its RetryStrategy.
	ErrUnavailable = errors.New("distlock: service unavailable")

	// ErrTooDeep means a reentrant acquire would exceed the depth limit set
	// with WithMaxDepth.
	ErrTooDeep = errors.New("distlock: reentrancy depth limit reached")

	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("distlock: client closed")
)

// Causes of loss that the Client itself detects. Both match ErrLockLost.
var (
	// ErrDeadlinePassed is the cause when the local deadline (the last
	// confirmed validity, less drift and safety margin) passed before a
	// refresh was confirmed.
	ErrDeadlinePassed = fmt.Errorf("%w: local deadline passed without a confirmed refresh", ErrLockLost)

	// ErrMaxHoldExceeded is the cause when a lock was held for longer than
	// the bound set with WithMaxHold. The Client releases such a lock.
	ErrMaxHoldExceeded = fmt.Errorf("%w: held longer than MaxHold", ErrLockLost)
)

// KeyError reports which key an operation was about.
type KeyError struct {
	Key string
	Op  string // "acquire", "refresh", "release"
	Err error
}

// Error implements error.
func (e *KeyError) Error() string {
	return fmt.Sprintf("%s %q: %v", e.Op, e.Key, e.Err)
}

// Unwrap returns the underlying error.
func (e *KeyError) Unwrap() error { return e.Err }

func keyErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return &KeyError{Key: key, Op: op, Err: err}
}
