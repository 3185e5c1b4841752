package redislock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/redislock"
)

// commandLog records every command as hooks that log or trace commands
// see it: cmd.String (as redisotel does), cmd.Args() encoded with
// encoding/json, and the arguments logged by slog's JSON handler (whose
// encoding zap's JSON encoder shares: both follow a pointer).
type commandLog struct {
	mu   sync.Mutex
	cmds []string // cmd.String of each command
	all  []string // every rendering of each command
}

func (c *commandLog) record(cmd redis.Cmder) {
	js, err := json.Marshal(cmd.Args())
	if err != nil {
		js = []byte(err.Error())
	}
	var sl bytes.Buffer
	slog.New(slog.NewJSONHandler(&sl, nil)).Info("command", "args", cmd.Args())
	c.cmds = append(c.cmds, cmd.String())
	c.all = append(c.all, cmd.String(), string(js), sl.String())
}

func (c *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.record(cmd)
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		for _, cmd := range cmds {
			c.record(cmd)
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

// shows returns the first rendering in log that contains one of secrets.
func (c *commandLog) shows(secrets ...string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.all {
		for _, s := range secrets {
			if strings.Contains(r, s) {
				return r, true
			}
		}
	}
	return "", false
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
	// A waiter that gives up: it queued (its queue member, which holds its
	// secret, read here), then leaves.
	admin := newClient(t, srv.Addr)
	short, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := b.Acquire(short, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		gaveUp <- err
	}()
	var member []string
	eventually(t, 10*time.Second, "the waiter queued", func() bool {
		member = admin.ZRange(ctx, queueKey(key), 0, -1).Val()
		return len(member) == 1
	})
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("acquired a held key")
	}
	fields := strings.Split(member[0], "|")
	if len(fields) < 5 || len(fields[1]) < 16 {
		t.Fatalf("queue member %q, want <id>|<secret>|...", member[0])
	}
	quitter := fields[1]
	eventually(t, 10*time.Second, "the waiter left the queue", func() bool { return admin.ZCard(ctx, queueKey(key)).Val() == 0 })
	got := make(chan driver.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
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
	if r, ok := log.shows(secret, quitter); ok {
		t.Fatalf("a logged command shows a secret: %.300s", r)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.cmds) < 3 {
		t.Fatalf("%d commands logged, want the tries and releases", len(log.cmds))
	}
	for _, s := range log.cmds {
		// A queue member and a grant's value prefix are the only arguments
		// of a script call with a '|', and both hold a secret (a script
		// loaded with EVAL has them in its source).
		if strings.HasPrefix(s, "evalsha ") && strings.Contains(s, "|") {
			t.Fatalf("a logged command shows a secret: %.300s", s)
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
	for _, l := range ls {
		if r, ok := log.shows(redislock.LeaseSecret(l)); ok {
			t.Fatalf("a logged command shows a secret: %.300s", r)
		}
	}
}
