package election

import (
	"context"
	"fmt"

	"github.com/distlock/distlock"
)

// An election is kept in the service as the lock of its key. campaign
// acquires the key as a candidacy (distlock.WithElection), with the
// candidate's value as the grant's owner; a backend with an election
// layout of its own keeps the candidacy there, and reports its leader as
// the key's holder, which leader reads and observe watches (see the
// package documentation).
func (e *Election) campaign(ctx context.Context, value string) (*Term, error) {
	// WithWait(true) comes before the lock options, which may make the
	// campaign a try (see WithLockOptions); the others after, which
	// override them.
	opts := make([]distlock.LockOption, 0, len(e.lockOpts)+4)
	opts = append(opts, distlock.WithWait(true))
	opts = append(opts, e.lockOpts...)
	opts = append(opts, distlock.WithMaxDepth(1), distlock.WithLockOwner(value), distlock.WithElection(e.name))
	lock, err := e.c.Acquire(ctx, e.key, opts...)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		// Granted as ctx ended: the caller gets an error, so no term.
		lock.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("%w: %w", distlock.ErrNotAcquired, ctx.Err())
	}
	return &Term{g: lock, value: value}, nil
}

func (e *Election) leader(ctx context.Context) (Leader, error) {
	h, held, err := e.c.Holder(ctx, e.key)
	if err != nil || !held {
		return Leader{}, err
	}
	return Leader{Value: h.Owner, Token: h.Token}, nil
}

func (e *Election) observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	w, err := e.c.Watch(ctx, e.key)
	if err != nil { // a closed Client, a backend that cannot read holders
		close(out)
		return out
	}
	go func() {
		defer close(out)
		// The latest leader not yet received, sent while w is read, so
		// that this goroutine ends with w whether or not anyone receives.
		var (
			pending, sent Leader
			hasSent       bool
			send          chan<- Leader // out while pending is to be sent
		)
		for {
			select {
			case h, ok := <-w:
				if !ok {
					return
				}
				pending, send = Leader{Value: h.Owner, Token: h.Token}, out
				if hasSent && pending == sent {
					send = nil // changed and back while the receiver was away
				}
			case send <- pending:
				sent, hasSent, send = pending, true, nil
			}
		}
	}()
	return out
}
