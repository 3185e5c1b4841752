package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// A try whose secret has a tombstone (its attempt was cleaned up, or the
// grant it asked for was released) gets TOO_LATE from acquire.lua: the
// server does nothing, and the try fails with an error worth retrying
// rather than an unexpected reply. Outside this test only a request sent
// again after its attempt ended can meet it, and nobody reads that reply;
// here the attempt itself tries again.
func TestTryAfterTombstone(t *testing.T) {
	srv := testserver.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := distlock.AcquireOptions{TTL: time.Minute}
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"Default", nil}, {"Unordered", []Option{WithUnordered()}}} {
		b, err := New(c, mode.opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		for _, tc := range []struct {
			name      string
			tombstone func(*attempt)
		}{
			{"Abandoned", func(a *attempt) { a.abandon(ctx, time.Now()) }},
			{"Released", func(a *attempt) {
				l, _, err := a.try(ctx, false)
				if err != nil || l == nil {
					t.Fatalf("first try: %v, %v", l, err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}},
		} {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				key := "too-late/" + mode.name + "/" + tc.name
				a := b.newAttempt(key, opts)
				tc.tombstone(a)
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
		}
	}
}
