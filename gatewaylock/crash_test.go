package gatewaylock_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/gatewaylock"
	"github.com/distlock/distlock/memlock"
)

// A gateway that goes away (its port refuses connections) took its
// sessions along: the holder learns of the loss at its next renewal, not
// at its local deadline.
func TestGatewayGoneIsALossAtTheNextRenewal(t *testing.T) {
	g, err := gateway.New(memlock.New())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g}
	go srv.Serve(ln)
	b, err := gatewaylock.New("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := distlock.New(b, distlock.WithTTL(30*time.Second), distlock.WithRenewal(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	defer c.Close(ctx)
	l, err := c.Acquire(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	srv.Close() // as if the process died: the port refuses, nothing is released
	select {
	case <-l.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the loss was not seen in 20s")
	}
	if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) || errors.Is(err, distlock.ErrDeadlinePassed) {
		t.Errorf("Err() = %v, want a loss reported before the local deadline", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	g.Close(cctx)
}
