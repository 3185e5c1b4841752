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

// A fenced balance update: INCRBY after the token check, in one script, so
// the update is relative to the balance as it is (no read to go stale) and
// a holder whose lock lapsed while it paused changes nothing.
func ExampleFence_IncrBy() {
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
	balance := "accounts:" + redislock.HashTag(account) + ":balance"
	f := redislock.NewFence(rdb, redislock.DefaultFencePrefix)
	lock, err := client.Acquire(ctx, account)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lock.Release(ctx)
	n, err := f.IncrBy(lock.Context(), account, lock.Token(), balance, 25)
	switch {
	case errors.Is(err, fence.ErrStaleToken):
		fmt.Println("a newer holder has written; this one lost its lock")
	case err == nil:
		fmt.Println("balance:", n)
	}
}

// withdrawal takes ARGV[1] from the balance at KEYS[1], unless that would
// leave it below zero: a check and a write of the caller's own, run after
// the token check in the same script.
var withdrawal = redislock.NewFenceScript(`
local balance = tonumber(redis.call('GET', KEYS[1]) or '0')
if balance < tonumber(ARGV[1]) then
  return redis.error_reply('insufficient funds')
end
return redis.call('DECRBY', KEYS[1], ARGV[1])
`)

// A fenced withdrawal in the caller's own Lua, for updates that INCRBY
// alone cannot express.
func ExampleFence_Eval() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	f := redislock.NewFence(rdb, redislock.DefaultFencePrefix)

	const account = "accounts/42"
	var lock *distlock.Lock // held; see ExampleFence_IncrBy
	res, err := f.Eval(lock.Context(), account, lock.Token(), withdrawal,
		[]string{"accounts:" + redislock.HashTag(account) + ":balance"}, 30)
	switch {
	case errors.Is(err, fence.ErrStaleToken):
		fmt.Println("a newer holder has written; nothing was withdrawn")
	case errors.Is(err, redislock.ErrFencedScript):
		fmt.Println(err) // ... insufficient funds
	case err == nil:
		fmt.Println("balance:", res)
	}
}
