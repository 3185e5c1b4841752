package gatewaylock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/gateway"
	"github.com/distlock/distlock/gatewaylock"
	"github.com/distlock/distlock/memlock"
	"github.com/distlock/distlock/partition"
)

// serveLimited runs a gateway over memlock that allows max locks per
// session, and returns a Client of a Backend on it.
func serveLimited(t *testing.T, max int) *distlock.Client {
	t.Helper()
	mb := memlock.New()
	t.Cleanup(func() { mb.Close() })
	url := serve(t, mb, gateway.WithMaxLocks(max))
	b, err := gatewaylock.New(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	c, err := distlock.New(b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// An acquire past the gateway's limit of locks per session fails with
// ErrSessionLimit, which names the limit and how to raise it, at once:
// not retried as a busy gateway, so that a blocking Acquire does not wait
// for a lock it cannot get. The retry strategy never gives up, so that
// only the error can end the acquires before their context does.
func TestSessionLimitIsAnError(t *testing.T) {
	const max = 3
	c := serveLimited(t, max)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	forever := distlock.WithRetry(distlock.ExponentialBackoff(time.Millisecond, 50*time.Millisecond))
	var held []*distlock.Lock
	for i := range max {
		l, err := c.Acquire(ctx, fmt.Sprint("held/", i), forever)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	for name, acquire := range map[string]func() (*distlock.Lock, error){
		"Acquire":    func() (*distlock.Lock, error) { return c.Acquire(ctx, "one-more", forever) },
		"TryAcquire": func() (*distlock.Lock, error) { return c.TryAcquire(ctx, "one-more", forever) },
		"shared":     func() (*distlock.Lock, error) { return c.Acquire(ctx, "one-more", forever, distlock.WithShared(true)) },
		"shared, a try": func() (*distlock.Lock, error) {
			return c.TryAcquire(ctx, "one-more", forever, distlock.WithShared(true))
		},
	} {
		l, err := acquire()
		if err == nil {
			l.Release(ctx)
			t.Fatalf("%s: granted past the limit", name)
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: still retried when the test's time ran out: %v", name, err)
		}
		if !errors.Is(err, gatewaylock.ErrSessionLimit) || errors.Is(err, distlock.ErrUnavailable) || errors.Is(err, distlock.ErrNotAcquired) {
			t.Errorf("%s: %v, want ErrSessionLimit, and neither ErrUnavailable nor ErrNotAcquired", name, err)
		}
		for _, want := range []string{fmt.Sprint(max, " locks"), "--max-locks"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", name, err, want)
			}
		}
	}
	// The limit holds while the session is full, not after.
	if err := held[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, "one-more", forever)
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	l.Release(ctx)
	for _, l := range held[1:] {
		l.Release(ctx)
	}
}

// A partition member whose units and membership do not fit in the
// gateway's session (a member alone owns every unit) is not left owning
// fewer units than planned without a word: Run returns the error.
func TestPartitionPastTheSessionLimit(t *testing.T) {
	const max = 4
	c := serveLimited(t, max)
	p, err := partition.New(c, "over", partition.Count(2*max), partition.WithMember("alone"),
		partition.WithLockOptions(distlock.WithTTL(2*time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = p.Run(ctx, func(ctx context.Context, u partition.Unit) error {
		<-ctx.Done()
		return nil
	})
	if ctx.Err() != nil || !errors.Is(err, gatewaylock.ErrSessionLimit) {
		t.Fatalf("Run: %v (the test's context: %v), want ErrSessionLimit", err, ctx.Err())
	}
}
