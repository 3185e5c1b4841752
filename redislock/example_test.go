package redislock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/redislock"
)

// A lock whose fencing token guards a write to data kept in the same Redis.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	backend, err := redislock.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer backend.Close()
	client, err := distlock.New(backend)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close(ctx)

	const account = "accounts/42"
	l, err := client.Acquire(ctx, account)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Release(ctx)

	// The data key carries the account's hash tag: one Cluster slot.
	f := redislock.NewFence(rdb, redislock.DefaultFencePrefix)
	err = f.Set(l.Context(), account, l.Token(), "balance:"+redislock.HashTag(account), "100", 0)
	if errors.Is(err, fence.ErrStaleToken) {
		fmt.Println("a newer holder has written; this one lost its lock")
	}
}
