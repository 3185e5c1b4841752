package redislock

// The package's errors, and how go-redis errors are sorted into the
// distlock contract.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
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

// transientPrefixes are the Redis error replies worth retrying: the server is
// loading, failing over, or its cluster is reconfiguring.
var transientPrefixes = []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "BUSY", "NOREPLICAS", "UNBLOCKED"}

// classify turns a go-redis error into this package's error contract: the
// context's error when ctx ended; distlock.ErrUnavailable for transport
// failures and transient server replies; the server's reply otherwise. op
// names the operation, for the errors that nothing else names it in (a
// Fence's, List's, the eviction check's); it is "" for the errors of
// Acquire and of a lease, which the Client's distlock.KeyError names with
// the key.
func classify(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	at := "redislock: "
	if op != "" {
		at += op + ": "
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s%w: %w", at, context.Cause(ctx), err)
	}
	if errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("%s%w", at, err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := strings.TrimPrefix(rerr.Error(), "ERR ")
		for _, p := range transientPrefixes {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("%w: %s%w", driver.ErrUnavailable, at, err)
			}
		}
		return fmt.Errorf("%s%w", at, err)
	}
	return fmt.Errorf("%w: %s%w", driver.ErrUnavailable, at, err)
}

func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }
