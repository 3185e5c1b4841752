package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// childWaiterEnv, set to "<addr> <key>", makes the test binary a process
// that waits for key on the Redis at addr and never returns.
const childWaiterEnv = "REDISLOCK_TEST_CHILD_WAITER"

// killedWaiterLiveness is the waiters' liveness in TestKilledWaiterIsSkipped:
// far longer than the test may run, so that only the release's own check
// can skip a dead waiter.
const killedWaiterLiveness = time.Hour

func childWaiter(spec string) {
	addr, key, _ := strings.Cut(spec, " ")
	b, err := redislock.New(redis.NewClient(&redis.Options{Addr: addr}), redislock.WithWaiterLiveness(killedWaiterLiveness))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_, err = b.Acquire(context.Background(), key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	fmt.Fprintf(os.Stderr, "child waiter: Acquire returned: %v\n", err)
	os.Exit(3)
}

// A waiter whose process is killed (SIGKILL: it cannot leave the queue)
// keeps its place, first in line, with its liveness an hour away: a queue
// that waited for the liveness to lapse would stall for an hour. Once Redis
// has seen the dead process's connections close, the release that would
// wake it finds nobody subscribed to its Backend's wake channel, drops it
// and wakes the next waiter: the bound on the delay a dead waiter causes is
// that release's own run, not the liveness.
func TestKilledWaiterIsSkipped(t *testing.T) {
	srv := startRedis(t)
	ctx, admin := testCtx(t), newClient(t, srv.Addr)
	key := "killed-waiter"
	opts := []redislock.Option{redislock.WithWaiterLiveness(killedWaiterLiveness)}
	holder := newBackend(t, srv.Addr, opts...)
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childWaiterEnv+"="+srv.Addr+" "+key)
	var stderr strings.Builder
	child.Stderr = &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	t.Cleanup(func() {
		child.Process.Kill()
		<-exited
	})
	eventually(t, 30*time.Second, "the child queued", func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == 1 })
	deadID := admin.ZRange(ctx, queueKey(key), 0, 0).Val()[0]
	bid, _, _ := strings.Cut(deadID, ":")
	deadChannel := redislock.DefaultPrefix + "waiters:" + bid
	if n := admin.PubSubNumSub(ctx, deadChannel).Val()[deadChannel]; n != 1 {
		t.Fatalf("the child's wake channel %q has %d subscribers, want 1", deadChannel, n)
	}

	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("child: %v, want killed (stderr: %s)", err, stderr.String())
	}
	exited <- nil // for the clean-up
	eventually(t, 30*time.Second, "Redis saw the killed child's connections close", func() bool {
		return admin.PubSubNumSub(ctx, deadChannel).Val()[deadChannel] == 0
	})
	deadline, err := admin.ZScore(ctx, redislock.DefaultPrefix+redislock.HashTag(key)+":alive", deadID).Result()
	if err != nil {
		t.Fatalf("the killed waiter's liveness: %v", err)
	}

	live := newBackend(t, srv.Addr, opts...)
	got := make(chan error, 1)
	go func() {
		l, err := live.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 30*time.Second, "the live waiter queued behind the killed one", func() bool {
		q := admin.ZRange(ctx, queueKey(key), 0, -1).Val()
		return len(q) == 2 && q[0] == deadID
	})
	// The fault bites: the killed waiter is first in line, and its liveness
	// would keep it there for the rest of the hour.
	if now := admin.Time(ctx).Val(); float64(now.UnixMilli()) >= deadline {
		t.Fatalf("the killed waiter's liveness has lapsed (deadline %v, now %v): the test cannot tell the mechanisms apart",
			time.UnixMilli(int64(deadline)), now)
	}

	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The live waiter refreshes its place every 20 minutes and the killed
	// one's liveness lasts an hour: only the release can have woken it.
	if err := <-got; err != nil {
		t.Fatalf("live waiter: %v", err)
	}
	if _, err := admin.ZScore(ctx, queueKey(key), deadID).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("the killed waiter is still queued: %v", err)
	}
	if now := admin.Time(ctx).Val(); float64(now.UnixMilli()) >= deadline {
		t.Errorf("the grant came after the killed waiter's liveness lapsed")
	}
}
