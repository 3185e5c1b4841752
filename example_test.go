package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/memlock"
)

func Example() {
	ctx := context.Background()
	c, _ := distlock.New(memlock.New())
	defer c.Close(ctx)

	lock, err := c.Acquire(ctx, "jobs/nightly")
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	fmt.Println("holding", lock.Key(), "with token", lock.Token())
	if err := lock.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	// Output: holding jobs/nightly with token 1
}

// The guide's scenario: A gets token 33 and pauses; its lease lapses; B gets
// token 34 and writes; A wakes and writes with 33. The storage refuses it.
func Example_fencing() {
	ctx := context.Background()
	srv := memlock.New()
	a, _ := distlock.New(srv)
	b, _ := distlock.New(srv)
	defer a.Close(ctx)
	defer b.Close(ctx)
	for range 32 { // earlier grants, so that the tokens match the story
		l, _ := a.Acquire(ctx, "ledger")
		l.Release(ctx)
	}
	var storage fence.Register

	lockA, _ := a.Acquire(ctx, "ledger")
	fmt.Println("A holds token", lockA.Token())
	// A pauses (a GC pause, a stopped VM) past its lease; the service
	// drops the grant while A is not looking.
	srv.Revoke("ledger")

	lockB, _ := b.Acquire(ctx, "ledger")
	fmt.Println("B holds token", lockB.Token())
	fmt.Println("B writes:", storage.Admit("ledger", lockB.Token()))

	// A wakes up, still believing it holds the lock, and writes.
	err := storage.Admit("ledger", lockA.Token())
	fmt.Println("A writes:", err, errors.Is(err, fence.ErrStaleToken))
	lockB.Release(ctx)
	// Output:
	// A holds token 33
	// B holds token 34
	// B writes: <nil>
	// A writes: fence: stale token 33 for "ledger": 34 already admitted true
}

// Simulating the guide's pause, to test fencing of your own: a plain
// time.Sleep does not lose a lock, since the Client renews it meanwhile. A
// lock with renewal off and a short TTL is lost by simply waiting: the
// holder's context ends at its local deadline, the service frees the key
// after its TTL, and the next holder's token is higher. The same steps run
// on any backend, a real server included (with a TTL backend; see the
// README for the others).
func Example_pause() {
	ctx := context.Background()
	srv := memlock.New() // or redislock.New(rdb), etcdlock.New(cli), ...
	a, _ := distlock.New(srv)
	b, _ := distlock.New(srv)
	defer a.Close(ctx)
	defer b.Close(ctx)
	var storage fence.Register // or redislock.Fence, pglock.Fence, etcdlock.Fence

	lockA, _ := a.Acquire(ctx, "ledger",
		distlock.WithTTL(200*time.Millisecond), distlock.WithRenewal(distlock.NoRenewal))
	// A pauses: it does nothing until its lease lapses.
	<-lockA.Done()
	fmt.Println("A's lock lost:", errors.Is(lockA.Err(), distlock.ErrLockLost))

	lockB, _ := b.Acquire(ctx, "ledger") // granted once the service frees the key
	fmt.Println("B writes:", storage.Admit("ledger", lockB.Token()))
	// A wakes up and writes without looking at its lock: the fence refuses it.
	err := storage.Admit("ledger", lockA.Token())
	fmt.Println("A writes:", errors.Is(err, fence.ErrStaleToken))
	lockA.Release(ctx)
	lockB.Release(ctx)
	// Output:
	// A's lock lost: true
	// B writes: <nil>
	// A writes: true
}

func ExampleClient_Do() {
	ctx := context.Background()
	c, _ := distlock.New(memlock.New())
	defer c.Close(ctx)
	err := c.Do(ctx, "reports/daily", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost: stop working then.
		fmt.Println("generating the report")
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// generating the report
	// err: <nil>
}

// Two transfers in opposite directions at once cannot deadlock: AcquireAll
// takes the keys in sorted order.
func ExampleClient_AcquireAll() {
	ctx := context.Background()
	c, _ := distlock.New(memlock.New())
	defer c.Close(ctx)
	transfer := func(from, to string) {
		set, err := c.AcquireAll(ctx, []string{"accounts/" + from, "accounts/" + to})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer set.Release(ctx)
		// debit from, credit to, each write fenced with set.Lock(key).Token()
	}
	done := make(chan struct{})
	go func() { transfer("A", "B"); close(done) }()
	transfer("B", "A")
	<-done
	fmt.Println("both transfers done")
	// Output: both transfers done
}

// Reentrancy: code that already holds a key, through the lock's context,
// can call code that takes the same key.
func ExampleClient_Acquire_reentrant() {
	ctx := context.Background()
	c, _ := distlock.New(memlock.New())
	defer c.Close(ctx)
	outer, _ := c.Acquire(ctx, "account/7")
	inner, err := c.Acquire(outer.Context(), "account/7") // same grant
	fmt.Println(err, inner.Token() == outer.Token())
	inner.Release(ctx)
	outer.Release(ctx) // the last release gives the key back
	// Output: <nil> true
}
