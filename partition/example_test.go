package partition_test

import (
	"context"
	"fmt"
	"log"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/partition"
)

// A worker owns its share of 64 units; each write for a unit goes through
// the unit's fence with the unit's token, so that a worker that lost the
// unit, and writes late, is refused.
func Example() {
	client, err := distlock.New(memlock.New())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(context.Background())
	p, err := partition.New(client, "billing", partition.Count(64), partition.WithMember("worker-3"))
	if err != nil {
		log.Fatal(err)
	}
	store := fence.NewRegister() // stands for the storage's own check
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	err = p.Run(ctx, func(ctx context.Context, u partition.Unit) error {
		// Work for u.Name until ctx ends, each write fenced by u.Token.
		if err := store.Do(u.Name, u.Token, func() error { return nil /* write */ }); err != nil {
			return nil // a later owner wrote: this one lost the unit
		}
		<-ctx.Done()
		return nil
	})
	fmt.Println(err)
}

// Assign is what every member computes: the member each unit is planned
// to, shares within one unit of each other.
func ExampleAssign() {
	plan := partition.Assign("billing", []string{"worker-1", "worker-2", "worker-3"}, partition.Count(10))
	shares := map[string]int{}
	for _, m := range plan {
		shares[m]++
	}
	fmt.Println(len(plan), shares["worker-1"]+shares["worker-2"]+shares["worker-3"])
	// Output: 10 10
}
