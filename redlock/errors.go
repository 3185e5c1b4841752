package redlock

// The package's errors, and how go-redis errors are sorted into the
// distlock contract.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/rediserr"
)

// ErrClosed is returned by a Backend after Close. It matches
// distlock.ErrClosed.
var ErrClosed = driver.ClosedError("redlock")

// sorter sorts one node's go-redis errors by the rule redislock and redlock
// share. Its messages have no prefix: they are gathered into one error of
// the package's (see unavailable).
var sorter = driver.Sorter{Permanent: rediserr.Permanent}

// classify sorts one node's error (see driver.Sorter): transport failures,
// timeouts and transient replies are distlock.ErrUnavailable; ctx is the
// caller's context (not the per-node one), whose end is reported as such.
// A nil reply (redis.Nil) is no error: callers read it as a zero value.
func classify(ctx context.Context, err error) error {
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return sorter.Sort(ctx, nil, "", err)
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
		driver.ErrUnavailable, what, got, len(b.nodes), b.maj, b.nodeErrors(why))
}
