package distlock

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/distlock/distlock/driver"
)

// Errors returned by this package and by every Backend. Compare them with
// errors.Is: the errors actually returned wrap one or more of these with
// detail (the key, the backend's own error, the context's error). Those
// that backends return too are the same values as package driver's.
var (
	// ErrNotAcquired means the lock was not granted: it was held by someone
	// else when trying once, or the context ended while waiting. In the
	// latter case the error also matches ctx.Err().
	ErrNotAcquired = driver.ErrNotAcquired

	// ErrLockLost means a grant is gone: its lease expired, the service
	// dropped it, or the local deadline passed without a confirmed refresh.
	// Work done under the lock after this point is not protected.
	ErrLockLost = driver.ErrLockLost

	// ErrNotHeld means the caller released or refreshed a lock it no longer
	// holds because it had already released it (a double release).
	ErrNotHeld = errors.New("distlock: lock not held")

	// ErrReleased is the cause of a lock context that ended because the lock
	// was released by its holder.
	ErrReleased = errors.New("distlock: lock released")

	// ErrEnclosingEnded is matched by an *EnclosingError: the lock (or lock
	// set) is still held, but a lock whose context it was acquired under
	// ended, and so did its context.
	ErrEnclosingEnded = errors.New("distlock: enclosing lock ended")

	// ErrInvalidKey means a key is empty, too long, not valid UTF-8, or has
	// control characters. See ValidateKey.
	ErrInvalidKey = driver.ErrInvalidKey

	// ErrInvalidOption means an option is out of range, for example a TTL
	// that is not positive or larger than MaxTTL.
	ErrInvalidOption = driver.ErrInvalidOption

	// ErrUnavailable means the lock service could not be reached or failed
	// in a way worth retrying. Backends wrap their transient errors with it;
	// the Client retries them according to its RetryStrategy.
	ErrUnavailable = driver.ErrUnavailable

	// ErrTooDeep means a reentrant acquire would exceed the depth limit set
	// with WithMaxDepth.
	ErrTooDeep = errors.New("distlock: reentrancy depth limit reached")

	// ErrUpgrade means an exclusive lock was asked under the context of a
	// shared lock of the same key (WithShared): it would wait for its own
	// read lock. Release the shared lock first, or take the exclusive lock
	// from the start.
	ErrUpgrade = errors.New("distlock: a shared lock cannot be upgraded to an exclusive one")

	// ErrClosed means the Client (or its Backend) was closed.
	ErrClosed = driver.ErrClosed
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

// KeyError reports which key an operation was about. Every error that
// Acquire, TryAcquire, Do, AcquireAll, Lock.Refresh and Lock.Release return
// is a *KeyError (for AcquireAll, naming the key that failed, or the first
// key when the failure concerns none in particular; for Do, unless fn
// failed: then fn's error, joined with Release's if that failed too), and so
// is a LockSet's Err, with Op "hold", naming the part that ended.
type KeyError struct {
	Key string
	Op  string // "acquire", "refresh", "release", "hold"
	Err error
}

// Error implements error. A long key is shortened, with its length.
func (e *KeyError) Error() string {
	return fmt.Sprintf("%s %s: %v", e.Op, quoteKey(e.Key), e.Err)
}

// Unwrap returns the underlying error.
func (e *KeyError) Unwrap() error { return e.Err }

// EnclosingError is why a lock's (or a lock set's) context ended when the
// lock is still held but a lock whose context it was acquired under ended:
// Key is that enclosing lock's key (for a lock set, its part that ended, or
// "" when the set was released) and Err why it ended. It matches
// ErrEnclosingEnded, and not Err's own sentinels: the lock it describes
// is neither lost nor released, and must still be released by its holder.
type EnclosingError struct {
	Key string
	Err error
}

// Error implements error.
func (e *EnclosingError) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%v: %v", ErrEnclosingEnded, e.Err)
	}
	return fmt.Sprintf("distlock: enclosing lock %s ended: %v", quoteKey(e.Key), e.Err)
}

// Unwrap returns ErrEnclosingEnded.
func (e *EnclosingError) Unwrap() error { return ErrEnclosingEnded }

// maxQuotedKey is how much of a key messages and log lines show.
const maxQuotedKey = 64

// quoteKey quotes key for an error message or a log line: as %q does, but a
// key longer than maxQuotedKey bytes is cut there, with its length added.
func quoteKey(key string) string {
	if len(key) <= maxQuotedKey {
		return strconv.Quote(key)
	}
	cut := maxQuotedKey
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(key[:cut]), len(key))
}

// shortKey is key for a log line, cut as quoteKey cuts it.
func shortKey(key string) string {
	if len(key) <= maxQuotedKey {
		return key
	}
	cut := maxQuotedKey
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d bytes)", key[:cut], len(key))
}

func keyErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return &KeyError{Key: key, Op: op, Err: err}
}
