// Package redacttest records the commands of a go-redis client as hooks
// that log or trace commands see them, for tests that check what such a
// hook would show (see package redact).
package redacttest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// CommandLog is a go-redis hook (add it with AddHook) that records every
// command once it was answered, as hooks that log or trace commands
// render it: cmd.String (its arguments, and its reply or error, as
// redisotel shows them), cmd.Args() encoded with encoding/json, and the
// arguments logged by slog's JSON handler (whose encoding zap's JSON
// encoder shares: both follow a pointer). It is safe for concurrent use.
type CommandLog struct {
	mu   sync.Mutex
	cmds []string // cmd.String of each command
	all  []string // every rendering of each command
}

func (c *CommandLog) record(cmd redis.Cmder) {
	js, err := json.Marshal(cmd.Args())
	if err != nil {
		js = []byte(err.Error())
	}
	var sl bytes.Buffer
	slog.New(slog.NewJSONHandler(&sl, nil)).Info("command", "args", cmd.Args())
	c.mu.Lock()
	c.cmds = append(c.cmds, cmd.String())
	c.all = append(c.all, cmd.String(), string(js), sl.String())
	c.mu.Unlock()
}

// DialHook implements redis.Hook.
func (c *CommandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *CommandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c.record(cmd)
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *CommandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			c.record(cmd)
		}
		return err
	}
}

// Commands returns cmd.String of every command recorded, in order.
func (c *CommandLog) Commands() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.cmds...)
}

// Renderings returns every rendering of every command recorded.
func (c *CommandLog) Renderings() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.all...)
}

// Shows returns the first rendering recorded that contains one of
// secrets, and whether there is one.
func (c *CommandLog) Shows(secrets ...string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.all {
		for _, s := range secrets {
			if s != "" && strings.Contains(r, s) {
				return r, true
			}
		}
	}
	return "", false
}
