package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/testserver"
)

// A release whose reply was lost succeeds when retried (the first one
// recorded the permit as released), and a copy of a try that arrives
// after its attempt's clean-up does nothing.
func TestPermitRetriedReleaseAndLateTry(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	b, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sem, opts := driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute}
	l, err := b.AcquirePermit(ctx, "retried", sem, opts)
	if err != nil {
		t.Fatal(err)
	}
	p := l.(*permit)
	if n, err := p.a.runRelease(ctx, false, 0); err != nil || n != releaseReleased {
		t.Fatalf("the first release (its reply lost): %d, %v", n, err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("the release retried: %v; want success", err)
	}

	a := &permitAttempt{b: b, key: "late", keys: b.permitKeys("late"), secret: "late-secret", sem: sem, opts: opts}
	if q, _, err := a.try(ctx, false); err != nil || q == nil {
		t.Fatalf("try: %v, %v", q, err)
	}
	a.abandon(ctx, time.Now()) // its reply was lost
	if q, _, err := a.try(ctx, false); !errors.Is(err, errTooLate) {
		t.Fatalf("a copy of the try after the clean-up: %v, %v; want errTooLate", q, err)
	}
	if st, err := b.Permits(ctx, "late"); err != nil || len(st.Holders) != 0 || st.Limit != 0 {
		t.Fatalf("Permits after the late try: %+v, %v; want nothing", st, err)
	}
}
