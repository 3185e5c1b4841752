package election_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/memlock"
)

// endingCtx is a context that ends (Err turns Canceled) when its end is
// set, without a Done channel that anyone could see closed earlier.
type endingCtx struct {
	context.Context
	ended atomic.Bool
}

func (c *endingCtx) Err() error {
	if c.ended.Load() {
		return context.Canceled
	}
	return nil
}

// endsOnGrant is a backend that ends a context just after it grants a
// key: the grant and the end of the campaign's context come together.
type endsOnGrant struct {
	*memlock.Backend
	ctx *endingCtx
}

func (b endsOnGrant) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	l, err := b.Backend.Acquire(ctx, key, o)
	if err == nil {
		b.ctx.ended.Store(true)
	}
	return l, err
}

// A Campaign whose context ends as the key is granted returns an error,
// never a term, and resigns the grant.
func TestCampaignGrantedAsContextEnds(t *testing.T) {
	ctx := &endingCtx{Context: context.Background()}
	srv := memlock.New()
	c, err := distlock.New(endsOnGrant{srv, ctx})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	e, err := election.New(c, "svc")
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctx, "v")
	if term != nil || !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Campaign = %v, %v; want no term, and an error matching ErrNotAcquired and context.Canceled", term, err)
	}
	if h, held, err := srv.Holder(context.Background(), e.Key()); held || err != nil {
		t.Errorf("the grant was left behind: %+v, %v, %v", h, held, err)
	}
}

// recordsElection is a backend that records what each Acquire was asked.
type recordsElection struct {
	*memlock.Backend
	asked chan driver.AcquireOptions
}

func (b recordsElection) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	b.asked <- o
	return b.Backend.Acquire(ctx, key, o)
}

// Campaign asks the backend for a candidacy in the election (so that a
// backend with an election layout of its own can keep it there), with
// the candidate's value as its owner; a lock of the same key is a lock.
func TestCampaignAsksForACandidacy(t *testing.T) {
	ctx := context.Background()
	b := recordsElection{memlock.New(), make(chan driver.AcquireOptions, 1)}
	c, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	e, err := election.New(c, "payments/leader")
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctx, "10.0.0.7:8080")
	if err != nil {
		t.Fatal(err)
	}
	if o := <-b.asked; o.Election != "payments/leader" || o.Owner != "10.0.0.7:8080" || !o.Wait {
		t.Errorf("Campaign asked for %+v; want a candidacy in payments/leader, owner the value, waiting", o)
	}
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, e.Key())
	if err != nil {
		t.Fatal(err)
	}
	if o := <-b.asked; o.Election != "" {
		t.Errorf("Acquire of the election's key asked for a candidacy in %q; want a lock", o.Election)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
