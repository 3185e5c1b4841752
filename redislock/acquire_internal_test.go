package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// A try whose secret has a tombstone (its attempt was cleaned up), or
// whose grant was the lock's last release, gets TOO_LATE from acquire.lua:
// the server does nothing, and the try fails with an error worth retrying
// rather than an unexpected reply. Outside this test only a request sent
// again after its attempt ended can meet it (go-redis re-sends a request
// whose reply timed out, and the first copy may arrive later still), and
// nobody reads that reply; here the attempt itself tries again.
func TestTryAfterTombstone(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := driver.AcquireOptions{TTL: time.Minute}
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"Default", nil}, {"Unordered", []Option{WithUnordered()}}} {
		b, err := New(c, mode.opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		t.Run(mode.name+"/Abandoned", func(t *testing.T) {
			key := "too-late/" + mode.name
			a := b.newAttempt(key, opts)
			a.giveWaiterID()
			a.abandon(ctx, time.Now())
			tokens := c.Get(ctx, a.k.token).Val()
			l, _, err := a.try(ctx, true)
			if l != nil || !errors.Is(err, errTooLate) || !errors.Is(err, distlock.ErrUnavailable) {
				t.Fatalf("try after the tombstone: %v, %v; want %v", l, err, errTooLate)
			}
			if n := c.Exists(ctx, a.k.lock, a.k.queue, a.k.alive).Val(); n != 0 {
				t.Errorf("the refused try left %d of lock, queue, liveness keys", n)
			}
			if got := c.Get(ctx, a.k.token).Val(); got != tokens {
				t.Errorf("the refused try drew a token: counter %q, was %q", got, tokens)
			}
		})
		t.Run(mode.name+"/Released", func(t *testing.T) {
			key := "late-after-release/" + mode.name
			a := b.newAttempt(key, opts)
			first, _, err := a.try(ctx, false)
			if err != nil || first == nil {
				t.Fatalf("first try: %v, %v", first, err)
			}
			if err := first.Release(ctx); err != nil {
				t.Fatal(err)
			}
			tokens := c.Get(ctx, a.k.token).Val()
			late, _, err := a.try(ctx, false) // a late copy of the granted request
			if late != nil || !errors.Is(err, errTooLate) {
				t.Fatalf("late try: %v, %v; want %v", late, err, errTooLate)
			}
			if got := c.Get(ctx, a.k.token).Val(); got != tokens {
				t.Errorf("the late try drew a token: counter %q, was %q", got, tokens)
			}
			other, err := b.Acquire(ctx, key, opts)
			if err != nil {
				t.Fatalf("another Acquire after the late try: %v", err)
			}
			if err := other.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
