package gatewaylock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/filelock"
	"github.com/distlock/distlock/gateway"
)

// A gateway that caps every wait at nothing answers keepalives at once:
// the session's loop keeps to a pace (here at most one keepalive per
// 250ms) instead of sending them back to back.
func TestKeepaliveLoopDoesNotSpin(t *testing.T) {
	fb, err := filelock.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := startFront(t, fb, "127.0.0.1:0", gateway.WithMaxWait(0))
	b := newBackend(t, f.url)
	ctx := context.Background()
	l, err := b.Acquire(ctx, "pace", driver.AcquireOptions{TTL: 10 * time.Second, Owner: "me"})
	if err != nil {
		t.Fatal(err)
	}
	before := f.counts()["POST /v1/sessions/{id}/keepalive"]
	start := time.Now()
	time.Sleep(time.Second) // a span to count in, not a wait for something
	n := f.counts()["POST /v1/sessions/{id}/keepalive"] - before
	// At the pace, about 4 in a second (whatever the machine's load, at
	// most 1 + span/250ms); spinning, hundreds.
	if most := 2 + int(time.Since(start)/(250*time.Millisecond)); n > most {
		t.Errorf("%d keepalives in %v, want at most %d", n, time.Since(start).Round(time.Millisecond), most)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
