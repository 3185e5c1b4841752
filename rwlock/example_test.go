package rwlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/rwlock"
)

func Example() {
	ctx := context.Background()
	client, err := distlock.New(memlock.New())
	if err != nil {
		panic(err)
	}
	defer client.Close(ctx)

	rw, err := rwlock.New(client, "catalog")
	if err != nil {
		panic(err)
	}
	a, _ := rw.RLock(ctx)
	b, _ := rw.RLock(ctx)
	readers, _ := rw.Readers(ctx)
	fmt.Println("readers:", len(readers))
	_, err = rw.TryLock(ctx)
	fmt.Println("writer while reading:", errors.Is(err, distlock.ErrNotAcquired))
	_, err = rw.Lock(a.Context()) // under a read lock's context: would wait for itself
	fmt.Println("upgrade:", errors.Is(err, distlock.ErrUpgrade))
	a.Release(ctx)
	b.Release(ctx)

	w, _ := rw.Lock(ctx)
	fmt.Println("writer's token above the readers':", w.Token() > b.Token())
	w.Release(ctx)
	// Output:
	// readers: 2
	// writer while reading: true
	// upgrade: true
	// writer's token above the readers': true
}
