package pglock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
)

// A lease-table grant made as Close begins is released before Close
// returns: Close waits for the Acquire that got it, which finds the
// Backend closed and frees the row, on the pool that Close then closes (a
// Backend from OpenURL owns it). Freed after the pool was closed, the
// release failed and the row held the key for its TTL, for nobody.
func TestLeaseGrantAtCloseIsReleased(t *testing.T) {
	ctx, key := testCtx(t), "lease/grant-at-close/"+t.Name()
	b, err := pglock.OpenURL(ctx, server.DSN+"&mode=lease&poll_interval=1h")
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	pglock.OnGrabbed(t, func() {
		go func() { closed <- b.Close() }()
		// Close must wait for this Acquire; before it did, it returned
		// at once. Bounded, so that the waiting Close does not hold the
		// test up.
		select {
		case err := <-closed:
			closed <- err
		case <-time.After(2 * time.Second):
		}
	})
	if _, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Hour}); !errors.Is(err, pglock.ErrClosed) {
		t.Fatalf("Acquire granted as Close began: %v, want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	other := newLeaseBackend(t, server.DSN)
	l, err := other.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("the key is still held after Close returned: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
