package driver

import "errors"

// Errors that every Backend returns, wrapped with detail (the service's own
// error, the context's error). The Client adds the key and the operation
// (its KeyError), so a backend's error need not name them. Package distlock
// exports the same values under the same names, so that callers compare them
// with errors.Is without importing this package.
var (
	// ErrNotAcquired means the lock was not granted: it was held by someone
	// else when trying once, or the context ended while waiting. In the
	// latter case the error also matches ctx.Err().
	ErrNotAcquired = errors.New("distlock: not acquired")

	// ErrLockLost means a grant is gone: its lease expired, the service
	// dropped it, or the local deadline passed without a confirmed refresh.
	// Work done under the lock after this point is not protected.
	ErrLockLost = errors.New("distlock: lock lost")

	// ErrInvalidKey means a key is empty, too long, not valid UTF-8, or has
	// control characters. See ValidateKey.
	ErrInvalidKey = errors.New("distlock: invalid key")

	// ErrInvalidOption means an option is out of range, for example a TTL
	// that is not positive or larger than MaxTTL, or that a URL is malformed.
	ErrInvalidOption = errors.New("distlock: invalid option")

	// ErrUnavailable means the lock service could not be reached or failed
	// in a way worth retrying. Backends wrap their transient errors with it;
	// the Client retries them according to its RetryStrategy.
	ErrUnavailable = errors.New("distlock: service unavailable")

	// ErrClosed means a Client, or a Backend, was closed. A backend's own
	// closed error (see ClosedError) matches it.
	ErrClosed = errors.New("distlock: closed")
)
