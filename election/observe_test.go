package election_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/distlock/distlock"
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
