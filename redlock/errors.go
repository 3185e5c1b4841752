package redlock

// The package's errors, and how go-redis errors are sorted into the
// distlock contract.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/backend"
)

// ErrClosed is returned by a Backend after Close. It matches
// distlock.ErrClosed.
var ErrClosed = backend.ClosedError("redlock")

// transientPrefixes are the Redis error replies worth retrying.
var transientPrefixes = []string{"LOADING", "READONLY", "MASTERDOWN", "BUSY", "TRYAGAIN"}

// classify sorts one node's error: transport failures, timeouts and
// transient replies are distlock.ErrUnavailable; ctx is the caller's
// context (not the per-node one), whose end is reported as such.
func classify(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, redis.Nil) {
		return nil
	}
	if ctx.Err() != nil {
		if errors.Is(err, context.Cause(ctx)) {
			return err // says so already
		}
		return fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := strings.TrimPrefix(rerr.Error(), "ERR ")
		for _, p := range transientPrefixes {
			if strings.HasPrefix(msg, p) {
				return fmt.Errorf("%w: %w", distlock.ErrUnavailable, err)
			}
		}
		return err
	}
	return fmt.Errorf("%w: %w", distlock.ErrUnavailable, err)
}

// quietCause is an error that reads as msg and matches cause, whose
// text msg shows already.
type quietCause struct {
	msg   string
	cause error
}

func (e quietCause) Error() string { return e.msg }
func (e quietCause) Unwrap() error { return e.cause }

// nodeErrors describes the nodes that did not take part, for the error of
// an operation that found too few: "node 3 (127.0.0.1:6381): dial tcp ...;
// node 4 ...". why[i] is "" for a node that took part.
func (b *Backend) nodeErrors(why []string) string {
	var parts []string
	for i, w := range why {
		if w != "" {
			parts = append(parts, b.names[i]+": "+w)
		}
	}
	return strings.Join(parts, "; ")
}

// unavailable is the error of an operation that heard from too few nodes.
func (b *Backend) unavailable(what string, got int, why []string) error {
	return fmt.Errorf("%w: redlock: %s: %d of %d nodes, %d needed; not counted: %s",
		distlock.ErrUnavailable, what, got, len(b.nodes), b.maj, b.nodeErrors(why))
}
