package etcdlock

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fence"
)

// Errors of this package, for errors.Is. The errors actually returned wrap
// them with detail, and also wrap the distlock sentinel that says what to
// do: a lost session is distlock.ErrLockLost for a held lock and
// distlock.ErrUnavailable (worth retrying) for an acquire that was waiting.
var (
	// ErrSessionLost means the etcd lease behind a session ended: it expired
	// or was revoked, or etcd could not be reached to keep it alive. Every
	// lock of the session is lost with it.
	ErrSessionLost = errors.New("etcdlock: session lost")

	// ErrClosed means the Backend was closed. It matches
	// distlock.ErrClosed.
	ErrClosed = driver.ClosedError("etcdlock")
)

// errLeaseGone is the cause when etcd answers that the session's lease does
// not exist any more.
var errLeaseGone = fmt.Errorf("%w: etcd reports the lease expired or revoked", ErrSessionLost)

// FenceError reports that a fenced transaction was refused by etcd because
// the lock it was fenced with no longer holds: its key is gone or belongs to
// a later grant. It matches distlock.ErrLockLost and fence.ErrStaleToken.
type FenceError struct {
	Key   string // the lock's key, as given to Acquire
	Token uint64 // the token the transaction was fenced with
}

// Error implements error.
func (e *FenceError) Error() string {
	return fmt.Sprintf("etcdlock: fenced transaction refused: the lock on %q with token %d no longer holds", e.Key, e.Token)
}

// Is reports whether target is distlock.ErrLockLost or fence.ErrStaleToken.
func (e *FenceError) Is(target error) bool {
	return target == driver.ErrLockLost || target == fence.ErrStaleToken
}

// sortErr turns an error of an etcd call made with rctx (ctx bounded by the
// request timeout) into what the distlock contract asks for (see
// driver.Sorter), and a lease that etcd no longer has into ErrUnavailable
// with errLeaseGone, which the session reports as its loss.
func (b *Backend) sortErr(ctx, rctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && (rctx == nil || rctx.Err() == nil) && errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, errLeaseGone)
	}
	return b.sorter.Sort(ctx, rctx, "", err)
}

// permanent reports whether etcd refused a request in a way that retrying
// cannot fix.
func permanent(err error) bool {
	var code codes.Code
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	} else if s, ok := status.FromError(err); ok {
		code = s.Code()
	} else {
		return false
	}
	switch code {
	case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.Unimplemented:
		return true
	}
	return false
}
