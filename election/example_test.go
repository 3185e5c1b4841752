package election_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/election"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/memlock"
)

// Two candidates, one term at a time: the second is elected when the
// first resigns, with a larger token, and the storage refuses the first
// leader's late write.
func Example() {
	ctx := context.Background()
	client, _ := distlock.New(memlock.New(), distlock.WithTTL(10*time.Second))
	defer client.Close(ctx)
	e, _ := election.New(client, "payments/leader")

	storage := fence.NewRegister()
	first, _ := e.Campaign(ctx, "10.0.0.7:8080")
	leader, _ := e.Leader(ctx)
	fmt.Println("leader:", leader.Value)
	fmt.Println("first's write:", storage.Admit("payments", first.Token()))
	first.Resign(ctx)

	second, _ := e.Campaign(ctx, "10.0.0.8:8080")
	leader, _ = e.Leader(ctx)
	fmt.Println("leader:", leader.Value, "newer term:", second.Token() > first.Token())
	fmt.Println("second's write:", storage.Admit("payments", second.Token()))
	err := storage.Admit("payments", first.Token()) // the first leader, late
	fmt.Println("first's late write refused:", errors.Is(err, fence.ErrStaleToken))
	second.Resign(ctx)

	_, err = e.Leader(ctx)
	fmt.Println("no leader:", errors.Is(err, election.ErrNoLeader))
	// Output:
	// leader: 10.0.0.7:8080
	// first's write: <nil>
	// leader: 10.0.0.8:8080 newer term: true
	// second's write: <nil>
	// first's late write refused: true
	// no leader: true
}

// Run leads while its function runs: the function's context ends when the
// term does, and Run resigns when the function returns.
func ExampleRun() {
	ctx := context.Background()
	client, _ := distlock.New(memlock.New())
	defer client.Close(ctx)
	e, _ := election.New(client, "reports/leader")

	errDone := errors.New("done")
	err := election.Run(ctx, e, "worker-1", func(ctx context.Context, term *election.Term) error {
		fmt.Println("leading, term", term.Token())
		return errDone // Run resigns and returns it
	})
	fmt.Println(errors.Is(err, errDone))
	// Output:
	// leading, term 1
	// true
}
