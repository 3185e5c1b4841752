package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/memlock"
)

// failingRelease's leases cannot be released: the service is unavailable.
type failingRelease struct{ *memlock.Backend }

type failingReleaseLease struct{ driver.Lease }

func (b failingRelease) Acquire(ctx context.Context, key string, o driver.AcquireOptions) (driver.Lease, error) {
	l, err := b.Backend.Acquire(ctx, key, o)
	if err != nil {
		return nil, err
	}
	return failingReleaseLease{l}, nil
}

var errDown = fmt.Errorf("%w: connection refused", distlock.ErrUnavailable)

func (failingReleaseLease) Release(context.Context) error { return errDown }

// Each layer says once what it adds: the operation and key (the Client's
// KeyError), that the release goes on in the background, and the backend's
// own error.
func TestReleaseErrorSaysEachThingOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newClient(t, failingRelease{memlock.New()}, distlock.WithRetry(distlock.NoRetry))
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		err = l.Release(ctx)
		want := `release "k": not confirmed, retrying in the background: distlock: service unavailable: connection refused`
		if err == nil || err.Error() != want {
			t.Errorf("Release: %v\nwant      %s", err, want)
		}
		if !errors.Is(err, distlock.ErrUnavailable) {
			t.Errorf("Release: %v does not match ErrUnavailable", err)
		}
		c.Close(ctx) // the background retries end with the Client
	})
}

// An error about a long key quotes a bounded part of it, with its length.
func TestKeyErrorShortensLongKeys(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, memlock.New())
	long := strings.Repeat("k", distlock.MaxKeyLen+1)
	_, err := c.Acquire(ctx, long)
	if err == nil || len(err.Error()) > 200 || !strings.Contains(err.Error(), fmt.Sprintf("(%d bytes)", len(long))) {
		t.Errorf("error about a %d-byte key (%d bytes): %.300v", len(long), len(err.Error()), err)
	}
	huge := strings.Repeat("é", 1<<19) // 1 MiB, cut within a character
	_, err = c.Acquire(ctx, huge)
	if msg := err.Error(); len(msg) > 200 || !strings.Contains(msg, "(1048576 bytes)") || strings.ContainsRune(msg, 0xfffd) {
		t.Errorf("error about a 1 MiB key: %.300q", msg)
	}
}
