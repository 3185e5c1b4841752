package redislock

// The package's errors, and how go-redis errors are sorted into the
// distlock contract.

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/rediserr"
)

// Errors of this package, for errors.Is. Errors about the service itself
// wrap the distlock sentinels instead (distlock.ErrUnavailable,
// distlock.ErrLockLost, distlock.ErrNotAcquired, distlock.ErrInvalidOption).
var (
	// ErrClosed is returned by a Backend after Close. It matches
	// distlock.ErrClosed.
	ErrClosed = driver.ClosedError("redislock")

	// ErrWrongSlot means a Fence data key does not carry the hash tag of its
	// resource (see HashTag), so that the fence and the data could live on
	// different Cluster nodes and could not be checked and written in one
	// atomic step.
	ErrWrongSlot = errors.New("redislock: data key is not tagged with the resource's hash tag")
)

// sorter sorts go-redis errors by the rule redislock and redlock share.
var sorter = driver.Sorter{Pkg: "redislock", Permanent: rediserr.Permanent}

// classify turns a go-redis error into this package's error contract (see
// driver.Sorter): the context's error when ctx ended; distlock.ErrUnavailable
// for transport failures and transient server replies; the server's reply
// otherwise. op names the operation, for the errors that nothing else names
// it in (a Fence's, List's, the eviction check's); it is "" for the errors
// of Acquire and of a lease, which the Client's distlock.KeyError names with
// the key.
func classify(ctx context.Context, op string, err error) error {
	return sorter.Sort(ctx, nil, op, err)
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// secretRefused is the prefix of the error of a script given a secret
// that no Backend draws (not base32): the client sent a redact.Secret as
// text, "[secret]" for every grant, which would let grants match each
// other's. Every script that takes a secret checks it first, so that such
// a call has done nothing.
const secretRefused = "BADSECRET"

// isSecretRefused reports whether err is a script's refusal of its secret
// (secretRefused): the script did nothing, and an acquire that met it
// leaves nothing to clean up.
func isSecretRefused(err error) bool { return redis.HasErrorPrefix(err, secretRefused) }
