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
