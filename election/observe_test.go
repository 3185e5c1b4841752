package election_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/memlock"
)

// Observe never sends the leader it sent last: a value proclaimed and
// proclaimed back while the receiver was away is no change.
func TestObserveSendsNoRepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c, err := distlock.New(memlock.New())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		e, err := election.New(c, "svc")
		if err != nil {
			t.Fatal(err)
		}
		ch := e.Observe(ctx)
		if l := <-ch; l != (election.Leader{}) {
			t.Fatalf("first = %+v, want no leader", l)
		}
		term, err := e.Campaign(ctx, "v1")
		if err != nil {
			t.Fatal(err)
		}
		if l := <-ch; l != (election.Leader{Value: "v1", Token: term.Token()}) {
			t.Fatalf("then %+v, want the term with v1", l)
		}
		for _, v := range []string{"v2", "v1"} {
			if err := term.Proclaim(ctx, v); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // Observe has read it, and nobody receives
		}
		if err := term.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if l := <-ch; l != (election.Leader{}) {
			t.Errorf("after v2 and back to v1, and a resignation: %+v, want no leader", l)
		}
		cancel()
		for range ch {
		}
	})
}

// bare hides every optional interface of a memlock Backend and its leases:
// a backend that can only acquire.
type bare struct{ b *memlock.Backend }

func (b bare) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	l, err := b.b.Acquire(ctx, key, o)
	if err != nil {
		return nil, err
	}
	return struct{ driver.Lease }{l}, nil
}

// On a backend that can neither store a new value for a held grant nor
// read a key's holder, Proclaim and Leader say so (errors.ErrUnsupported),
// and Observe's channel is closed once the context ends.
func TestUnsupportedBackend(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := distlock.New(bare{memlock.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	e, err := election.New(c, "svc")
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := term.Proclaim(ctx, "v2"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Proclaim: %v, want errors.ErrUnsupported", err)
	}
	if term.Value() != "v1" {
		t.Errorf("Value() after a failed Proclaim = %q, want v1", term.Value())
	}
	if _, err := e.Leader(ctx); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Leader: %v, want errors.ErrUnsupported", err)
	}
	ch := e.Observe(ctx)
	cancel()
	for range ch {
	}
	if err := term.Resign(context.Background()); err != nil {
		t.Errorf("Resign: %v", err)
	}
}

// New refuses a nil Client and names that make no key.
func TestNewBadInput(t *testing.T) {
	c, err := distlock.New(memlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	for _, tc := range []struct {
		name string
		c    *distlock.Client
		n    string
		want error
	}{
		{"nil client", nil, "svc", distlock.ErrInvalidOption},
		{"empty name", c, "", distlock.ErrInvalidKey},
		{"control character", c, "svc\n", distlock.ErrInvalidKey},
		{"too long", c, strings.Repeat("x", distlock.MaxKeyLen), distlock.ErrInvalidKey},
	} {
		if _, err := election.New(tc.c, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	e, err := election.New(c, "svc")
	if err != nil {
		t.Fatal(err)
	}
	if e.Key() != election.KeyPrefix+"svc" || e.Name() != "svc" {
		t.Errorf("Name() = %q, Key() = %q", e.Name(), e.Key())
	}
	if _, err := e.Campaign(context.Background(), "\xff"); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Campaign with a value that is not UTF-8: %v, want ErrInvalidOption", err)
	}
}
