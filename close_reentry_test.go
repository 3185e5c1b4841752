package distlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// gatedRelease holds every Release until gate is closed, and says on
// entered which key's release came first.
type gatedRelease struct {
	*memlock.Backend
	entered chan string
	gate    chan struct{}
}

func (g gatedRelease) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	l, err := g.Backend.Acquire(ctx, key, o)
	if err != nil {
		return nil, err
	}
	return gatedLease{l, key, g}, nil
}

type gatedLease struct {
	driver.Lease
	key string
	g   gatedRelease
}

func (l gatedLease) Release(ctx context.Context) error {
	select {
	case l.g.entered <- l.key:
	default:
	}
	<-l.g.gate
	return l.Lease.Release(ctx)
}

// A reentrant Acquire while Close is releasing the Client's locks fails
// with ErrClosed, even through the context of a lock that Close has not
// reached yet: Close would release the grant under the new handle.
func TestReentryDuringCloseRefused(t *testing.T) {
	ctx := context.Background()
	g := gatedRelease{Backend: memlock.New(), entered: make(chan string, 1), gate: make(chan struct{})}
	c, err := distlock.New(g)
	if err != nil {
		t.Fatal(err)
	}
	locks := map[string]*distlock.Lock{}
	for _, k := range []string{"a", "b"} {
		l, err := c.Acquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		locks[k] = l
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close(ctx) }()
	var first string
	select {
	case first = <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Close released nothing in 10s")
	}
	other := map[string]string{"a": "b", "b": "a"}[first]
	l, err := c.Acquire(locks[other].Context(), other)
	if err == nil {
		t.Errorf("reentered %q while Close was releasing %q (token %d)", other, first, l.Token())
	} else if !errors.Is(err, distlock.ErrClosed) {
		t.Errorf("reentry during Close: %v, want ErrClosed", err)
	}
	close(g.gate)
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return in 10s")
	}
	if hs, _ := g.List(ctx, ""); len(hs) != 0 {
		t.Errorf("left behind: %+v", hs)
	}
}
