package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sorter sorts the errors of a service's client library into the contract
// of a Backend, by one rule for every backend:
//
//   - the caller's context ended: an error matching ctx.Err() and its
//     cause, not ErrUnavailable (no retry can help an ended context); an
//     error that says so already is not wrapped in them again;
//   - the backend's own bound on one request passed: ErrUnavailable, "no
//     answer within" the bound, without a context error in the chain (it
//     must not be mistaken for the caller's);
//   - a closed Backend's ErrClosed (see ClosedError): as it is;
//   - a refusal that a retry cannot fix (Permanent): a plain error;
//   - anything else (a transport failure, a server that is loading, failing
//     over or out of resources): ErrUnavailable, which the Client retries.
//
// Messages start with the package's name, then the operation when the
// backend names one. A Sorter is safe for concurrent use.
type Sorter struct {
	// Pkg is the backend's package name, which messages start with
	// ("": none, for errors that a backend gathers into one of its own).
	Pkg string

	// Permanent reports whether the service refused a request in a way that
	// retrying cannot fix (no permission, bad arguments). nil: every error
	// is worth retrying.
	Permanent func(err error) bool

	// RequestTimeout is the backend's own bound on one request, named in
	// the error of a request that outlived it.
	RequestTimeout time.Duration
}

// Sort sorts err, the error of a request that op names ("" when the error
// reaches the caller through an operation that names itself, as Acquire,
// Refresh and Release do through the Client's KeyError). ctx is the
// caller's context and rctx (nil when there is none) the request's, ctx
// bounded by RequestTimeout.
func (s Sorter) Sort(ctx, rctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var at string
	if s.Pkg != "" {
		at = s.Pkg + ": "
	}
	if op != "" {
		at += op + ": "
	}
	switch {
	case errors.Is(err, ErrClosed):
		return err
	case ctx != nil && ctx.Err() != nil:
		cause := context.Cause(ctx)
		switch {
		case errors.Is(err, ctx.Err()) && errors.Is(err, cause):
			return fmt.Errorf("%s%w", at, err) // says so already
		case errors.Is(err, cause):
			return fmt.Errorf("%s%w: %w", at, ctx.Err(), err)
		case cause != ctx.Err():
			return fmt.Errorf("%s%w: %w: %w", at, ctx.Err(), cause, err)
		}
		return fmt.Errorf("%s%w: %w", at, ctx.Err(), err)
	case rctx != nil && rctx.Err() != nil:
		return fmt.Errorf("%w: %sno answer within %v: %v", ErrUnavailable, at, s.RequestTimeout, err)
	case s.Permanent != nil && s.Permanent(err):
		return fmt.Errorf("%s%w", at, err)
	}
	return fmt.Errorf("%w: %s%w", ErrUnavailable, at, err)
}
