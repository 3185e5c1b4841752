package redislock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// commandLog records every command as a hook that logs or traces commands
// sees it (cmd.String).
type commandLog struct {
	mu   sync.Mutex
	cmds []string
}

func (c *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.cmds = append(c.cmds, cmd.String())
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		for _, cmd := range cmds {
			c.cmds = append(c.cmds, cmd.String())
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

// A grant's secret lets whoever knows it release the grant: it stays out
// of what a command-logging hook sees, also for a waiter, whose place in
// the queue carries it, and a waiter that gives up and leaves the queue.
func TestSecretStaysOutOfCommandLogs(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	var log commandLog
	c := newClient(t, srv.Addr)
	c.AddHook(&log)
	b := mustNew(t, c)
	t.Cleanup(func() { b.Close() })
	key := "logged"
	holder := newBackend(t, srv.Addr)
	lh, err := holder.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// A waiter that gives up: it queued, then leaves.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = b.Acquire(short, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	cancel()
	if err == nil {
		t.Fatal("acquired a held key")
	}
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	admin := newClient(t, srv.Addr)
	eventually(t, 10*time.Second, "the waiter queued", func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == 1 })
	if err := lh.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	secret := redislock.LeaseSecret(l)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.cmds) < 3 {
		t.Fatalf("%d commands logged, want the tries and releases", len(log.cmds))
	}
	for _, s := range log.cmds {
		// The waiter that gave up had a secret of its own, unknown here: a
		// queue member and a grant's value prefix are the only arguments
		// of a script call with a '|', and both hold the secret (a script
		// loaded with EVAL has them in its source).
		if strings.Contains(s, secret) || strings.HasPrefix(s, "evalsha ") && strings.Contains(s, "|") {
			t.Fatalf("a logged command shows a secret: %.200s", s)
		}
	}
}

// A holder's refreshes (Refresh, and RefreshAll's batch of one and of
// many) carry the grant's secret too: it stays out of the logs as well.
func TestSecretStaysOutOfRefreshLogs(t *testing.T) {
	srv := startRedis(t)
	ctx := testCtx(t)
	var log commandLog
	c := newClient(t, srv.Addr)
	c.AddHook(&log)
	b := mustNew(t, c)
	t.Cleanup(func() { b.Close() })
	var ls []driver.Lease
	for _, key := range []string{"refreshed-a", "refreshed-b"} {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	if _, err := ls[0].Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, batch := range [][]driver.Lease{ls[:1], ls} {
		for _, r := range b.RefreshAll(ctx, batch, time.Minute) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, l := range ls {
		secret := redislock.LeaseSecret(l)
		for _, s := range log.cmds {
			if strings.Contains(s, secret) {
				t.Fatalf("a logged command shows a secret: %.200s", s)
			}
		}
	}
}
