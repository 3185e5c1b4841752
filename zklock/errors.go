package zklock

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// Errors of this package, for errors.Is. The errors actually returned wrap
// them with detail, and also wrap the distlock sentinel that says what to
// do: a lost session is distlock.ErrLockLost for a held lock and
// distlock.ErrUnavailable (worth retrying) for an acquire that was waiting.
var (
	// ErrSessionLost means the ZooKeeper session that a lock node belonged
	// to ended: the ensemble expired it (the client was cut off for longer
	// than the session timeout), or the Backend was closed. Every lock of
	// the session is lost with it.
	ErrSessionLost = errors.New("zklock: session lost")

	// ErrClosed means the Backend was closed. It matches distlock.ErrClosed.
	ErrClosed = driver.ClosedError("zklock")
)

// sortErr turns an error of a ZooKeeper request made with rctx (ctx bounded
// by the request timeout) into what the distlock contract asks for (see
// driver.Sorter).
func (b *Backend) sortErr(ctx, rctx context.Context, err error) error {
	return b.sorter.Sort(ctx, rctx, "", err)
}

// permanent reports whether ZooKeeper refused a request in a way that
// retrying cannot fix.
func permanent(err error) bool {
	for _, p := range []error{zk.ErrNoAuth, zk.ErrAuthFailed, zk.ErrInvalidACL, zk.ErrBadArguments, zk.ErrInvalidPath, zk.ErrInvalidFlags, zk.ErrNoChildrenForEphemerals} {
		if errors.Is(err, p) {
			return true
		}
	}
	return false
}

// lostReply reports whether a request failed in a way that leaves its
// effect unknown: it may have been applied with its reply lost.
func lostReply(err error) bool {
	return !errors.Is(err, zk.ErrNoServer) && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrNodeExists) && !permanent(err)
}
