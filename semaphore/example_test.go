package semaphore_test

import (
	"context"
	"fmt"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/semaphore"
)

func Example() {
	ctx := context.Background()
	client, err := distlock.New(memlock.New())
	if err != nil {
		panic(err)
	}
	defer client.Close(ctx)

	s, err := semaphore.New(client, "exports", 3, semaphore.WithSlots())
	if err != nil {
		panic(err)
	}
	a, _ := s.Acquire(ctx)
	b, _ := s.Acquire(ctx)
	fmt.Println("slots:", a.Slot(), b.Slot())
	limit, holders, _ := s.Holders(ctx)
	fmt.Println("limit:", limit, "held:", len(holders))
	a.Release(ctx)
	c, _ := s.Acquire(ctx)
	fmt.Println("reused slot:", c.Slot(), "token above b's:", c.Token() > b.Token())
	b.Release(ctx)
	c.Release(ctx)
	// Output:
	// slots: 0 1
	// limit: 3 held: 2
	// reused slot: 0 token above b's: true
}
