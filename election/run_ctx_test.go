package election_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/memlock"
)

// endsInRun is a context that reads as ended only to election.Run itself,
// as a context that ends just after Campaign granted a term does.
type endsInRun struct{ context.Context }

func (c endsInRun) Err() error {
	pc, _, _, _ := runtime.Caller(1)
	if strings.HasSuffix(runtime.FuncForPC(pc).Name(), "election.Run") {
		return context.Canceled
	}
	return nil
}

// A term granted as Run's context ends is resigned: left held, the Client
// would renew it, and the election would lead for nobody until Close.
func TestRunResignsATermGrantedAsItsContextEnds(t *testing.T) {
	ctx := context.Background()
	c, err := distlock.New(memlock.New())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	e, err := election.New(c, "run-ctx")
	if err != nil {
		t.Fatal(err)
	}
	err = election.Run(endsInRun{ctx}, e, "v", func(context.Context, *election.Term) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	if l, err := e.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Errorf("Run returned and left a leader: %+v, %v", l, err)
	}
}
