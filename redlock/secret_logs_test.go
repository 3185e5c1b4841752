package redlock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/redlock"
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

// A grant's secret lets whoever knows it release the grant on a node: it
// stays out of what a command-logging hook on a node's client shows.
func TestSecretStaysOutOfCommandLogs(t *testing.T) {
	// Fails as yet: the tombstone's key name (":released:<secret>", a key
	// that redis.Scripter takes as a string) and the scripts' secret and
	// queue-member arguments are passed as strings. Remove the skip to see.
	t.Skip("redlock: the grant's secret is still in its script calls' keys and arguments")
	srvs := startNodes(t, 3)
	ctx := testCtx(t)
	var log commandLog
	var nodes []redlock.Node
	for _, s := range srvs {
		c := newClient(t, s.Addr)
		c.AddHook(&log)
		nodes = append(nodes, c)
	}
	b, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	key := "logged"
	l, err := b.Acquire(ctx, key, distlock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	v, err := newClient(t, srvs[0].Addr).Get(ctx, lockKey(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	secret, _, _ := strings.Cut(v, "|")
	if _, err := l.Refresh(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, s := range log.cmds {
		if strings.Contains(s, secret) {
			t.Fatalf("a logged command shows a secret: %.200s", s)
		}
	}
}
