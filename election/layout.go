package election

import (
	"context"
	"fmt"

	"github.com/distlock/distlock"
)

// layout is how an election is kept in the service. lockLayout, a lock of
// the election's key, serves every backend; a service with a layout of its
// own will have another.
type layout interface {
	campaign(ctx context.Context, value string) (*Term, error)
	leader(ctx context.Context) (Leader, error)
	observe(ctx context.Context) <-chan Leader
}

// lockLayout keeps an election as the lock of its key: a term is a grant,
// with the candidate's value as the grant's owner.
type lockLayout struct{ e *Election }

func (l lockLayout) campaign(ctx context.Context, value string) (*Term, error) {
	e := l.e
	opts := append(e.lockOpts[:len(e.lockOpts):len(e.lockOpts)],
		distlock.WithWait(true), distlock.WithMaxDepth(1), distlock.WithLockOwner(value))
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

func (l lockLayout) leader(ctx context.Context) (Leader, error) {
	h, held, err := l.e.c.Holder(ctx, l.e.key)
	if err != nil || !held {
		return Leader{}, err
	}
	return Leader{Value: h.Owner, Token: h.Token}, nil
}

func (l lockLayout) observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	w, err := l.e.c.Watch(ctx, l.e.key)
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
