package redislock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/metrictest"
	"github.com/distlock/distlock/redislock"
)

// A balance updated relative to its value, fenced: the guide's paused
// holder (token 33) adds after the next holder (34) did, and its INCRBY is
// refused without changing the balance.
func TestFenceIncrBy(t *testing.T) {
	srv := startRedis(t)
	ctx, c := testCtx(t), newClient(t, srv.Addr)
	mp := metrictest.NewProvider()
	f := redislock.NewFence(c, redislock.DefaultFencePrefix, fence.WithMeterProvider(mp))
	const res = "acct/42"
	balance := "acct:" + redislock.HashTag(res) + ":balance"

	for _, step := range []struct {
		token uint64
		delta int64
		want  int64 // the new balance, or -1: refused
	}{
		{33, 100, 100},
		{34, 50, 150},
		{33, -150, -1}, // the paused holder wakes up
		{34, -20, 130}, // the current holder again
		{35, 0, 130},
	} {
		n, err := f.IncrBy(ctx, res, step.token, balance, step.delta)
		var se *fence.StaleTokenError
		switch {
		case step.want < 0 && !(errors.As(err, &se) && se.Token == step.token && se.Highest == 34):
			t.Errorf("IncrBy with token %d: %d, %v; want a *fence.StaleTokenError below 34", step.token, n, err)
		case step.want >= 0 && (err != nil || n != step.want):
			t.Errorf("IncrBy(%d) with token %d = %d, %v; want %d", step.delta, step.token, n, err, step.want)
		}
	}
	if v := c.Get(ctx, balance).Val(); v != "130" {
		t.Errorf("balance %q, want 130", v)
	}
	if n := metrictest.Rejections(t, mp, "redislock.Fence"); n != 1 {
		t.Errorf("distlock.fence.rejections %d after one refused write, want 1", n)
	}

	c.Set(ctx, "acct:"+redislock.HashTag(res)+":name", "alice", 0)
	if _, err := f.IncrBy(ctx, res, 35, "acct:"+redislock.HashTag(res)+":name", 1); !errors.Is(err, redislock.ErrFencedScript) || !strings.Contains(err.Error(), "not an integer") {
		t.Errorf("IncrBy on a string: %v, want ErrFencedScript saying why", err)
	}
	if _, err := f.IncrBy(ctx, res, 35, "balance", 1); !errors.Is(err, redislock.ErrWrongSlot) {
		t.Errorf("IncrBy on an untagged key: %v, want ErrWrongSlot", err)
	}
}

// Exec runs several commands after the check; a stale token runs none of
// them; each command's key is checked before anything is sent.
func TestFenceExec(t *testing.T) {
	srv := startRedis(t)
	ctx, c := testCtx(t), newClient(t, srv.Addr)
	f := redislock.NewFence(c, redislock.DefaultFencePrefix)
	const res = "orders/7"
	tag := redislock.HashTag(res)
	hash, log := "order:"+tag, "order:"+tag+":log"

	out, err := f.Exec(ctx, res, 34,
		[]any{"HINCRBY", hash, "items", 3},
		[]any{"RPUSH", log, "added 3", "by 34"},
		[]any{"PEXPIRE", log, time.Hour.Milliseconds()},
		[]any{"GET", "order:" + tag + ":missing"},
	)
	if err != nil || len(out) != 4 || out[0] != int64(3) || out[1] != int64(2) || out[2] != int64(1) || out[3] != nil {
		t.Fatalf("Exec = %v, %v; want [3 2 1 <nil>]", out, err)
	}
	if _, err := f.Exec(ctx, res, 33, []any{"HINCRBY", hash, "items", 100}, []any{"DEL", log}); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("stale Exec: %v, want ErrStaleToken", err)
	}
	if v, n := c.HGet(ctx, hash, "items").Val(), c.LLen(ctx, log).Val(); v != "3" || n != 2 {
		t.Errorf("after a refused Exec: items %q, log length %d; want 3 and 2", v, n)
	}

	// A command that fails stops the script; those before it ran.
	_, err = f.Exec(ctx, res, 34, []any{"HINCRBY", hash, "items", 1}, []any{"INCR", hash}, []any{"HINCRBY", hash, "items", 10})
	if !errors.Is(err, redislock.ErrFencedScript) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Exec with a failing command: %v, want ErrFencedScript with Redis's WRONGTYPE", err)
	}
	if v := c.HGet(ctx, hash, "items").Val(); v != "4" {
		t.Errorf("items %q after a failed Exec, want 4 (Redis does not undo the first command)", v)
	}

	for _, tc := range []struct {
		name string
		cmds [][]any
		want error
	}{
		{"no commands", nil, distlock.ErrInvalidOption},
		{"no key", [][]any{{"PING"}}, distlock.ErrInvalidOption},
		{"name not a string", [][]any{{42, hash}}, distlock.ErrInvalidOption},
		{"key not a string", [][]any{{"INCR", 42}}, distlock.ErrInvalidOption},
		{"untagged key", [][]any{{"INCR", "order:7"}}, redislock.ErrWrongSlot},
		{"another resource's key", [][]any{{"SET", hash, "x"}, {"INCR", "x:" + redislock.HashTag("orders/8")}}, redislock.ErrWrongSlot},
		{"the fence key", [][]any{{"SET", redislock.DefaultFencePrefix + tag + ":fence", "0"}}, distlock.ErrInvalidOption},
	} {
		if _, err := f.Exec(ctx, res, 40, tc.cmds...); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if h, err := f.Highest(ctx, res); err != nil || h != 34 {
		t.Errorf("Highest = %d, %v after refused calls; want 34", h, err)
	}
}

// withdraw takes ARGV[1] from the balance at KEYS[1] unless that leaves it
// below zero.
var withdraw = redislock.NewFenceScript(`
local balance = tonumber(redis.call('GET', KEYS[1]) or '0')
local amount = tonumber(ARGV[1])
if balance < amount then
  return redis.error_reply('insufficient funds: ' .. balance)
end
return redis.call('DECRBY', KEYS[1], amount)
`)

// Eval runs the caller's body after the check, with the caller's KEYS and
// ARGV; a stale token never runs it; a body cannot leave the fence key
// changed, whatever it does to it.
func TestFenceEval(t *testing.T) {
	srv := startRedis(t)
	ctx, c := testCtx(t), newClient(t, srv.Addr)
	mp := metrictest.NewProvider()
	f := redislock.NewFence(c, redislock.DefaultFencePrefix, fence.WithMeterProvider(mp))
	const res = "acct/9"
	tag := redislock.HashTag(res)
	balance, fenceKey := "acct:"+tag, redislock.DefaultFencePrefix+tag+":fence"
	c.Set(ctx, balance, "100", 0)

	if v, err := f.Eval(ctx, res, 34, withdraw, []string{balance}, 30); err != nil || v != int64(70) {
		t.Fatalf("withdraw 30 = %v, %v; want 70", v, err)
	}
	if v, err := f.Eval(ctx, res, 33, withdraw, []string{balance}, 70); !errors.Is(err, fence.ErrStaleToken) || v != nil {
		t.Errorf("stale withdraw: %v, %v; want ErrStaleToken", v, err)
	}
	if n := metrictest.Rejections(t, mp, "redislock.Fence"); n != 1 {
		t.Errorf("distlock.fence.rejections %d after one refused write, want 1", n)
	}
	_, err := f.Eval(ctx, res, 34, withdraw, []string{balance}, 71)
	if !errors.Is(err, redislock.ErrFencedScript) || !strings.Contains(err.Error(), "insufficient funds: 70") {
		t.Errorf("withdraw 71 of 70: %v, want ErrFencedScript with the body's message", err)
	}
	if v := c.Get(ctx, balance).Val(); v != "70" {
		t.Errorf("balance %q, want 70", v)
	}

	// The body's KEYS and ARGV are the caller's alone.
	echo := redislock.NewFenceScript(`return {#KEYS, KEYS[1], #ARGV, ARGV[1]}`)
	if v, err := f.Eval(ctx, res, 34, echo, []string{balance}, "a"); err != nil || !equalReply(v, []any{int64(1), balance, int64(1), "a"}) {
		t.Errorf("echo = %v, %v; want [1 %s 1 a]", v, err, balance)
	}
	if v, err := f.Eval(ctx, res, 34, redislock.NewFenceScript(`return nil`), nil); err != nil || v != nil {
		t.Errorf("a body returning nil: %v, %v", v, err)
	}

	// Bodies that change the fence key, by its name: it is set back, the
	// call fails, and the stale writer is still refused afterwards.
	for name, body := range map[string]string{
		"deletes it":          `redis.call('DEL', ARGV[1])`,
		"lowers it":           `redis.call('SET', ARGV[1], '1'); return 1`,
		"lowers it and fails": `redis.call('SET', ARGV[1], '1'); error('later')`,
	} {
		_, err := f.Eval(ctx, res, 34, redislock.NewFenceScript(body), nil, fenceKey)
		if !errors.Is(err, redislock.ErrFencedScript) || !strings.Contains(err.Error(), "fence key") {
			t.Errorf("a body that %s: %v, want ErrFencedScript about the fence key", name, err)
		}
		if h, err := f.Highest(ctx, res); err != nil || h != 34 {
			t.Errorf("after a body that %s: Highest %d, %v; want 34", name, h, err)
		}
		if _, err := f.Eval(ctx, res, 33, withdraw, []string{balance}, 1); !errors.Is(err, fence.ErrStaleToken) {
			t.Errorf("after a body that %s, the stale writer: %v, want ErrStaleToken", name, err)
		}
	}

	if _, err := f.Eval(ctx, res, 35, redislock.NewFenceScript(`return (`), nil); !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "does not compile") {
		t.Errorf("a body that does not compile: %v, want ErrInvalidOption saying so", err)
	}
	if _, err := f.Eval(ctx, res, 34, nil, nil); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("nil script: %v", err)
	}
	if _, err := f.Eval(ctx, res, 34, withdraw, []string{"acct:9"}, 1); !errors.Is(err, redislock.ErrWrongSlot) {
		t.Errorf("untagged key: %v, want ErrWrongSlot", err)
	}
	if _, err := f.Eval(ctx, res, 34, withdraw, []string{fenceKey}, 1); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("the fence key among KEYS: %v, want ErrInvalidOption", err)
	}
	if v := c.Get(ctx, balance).Val(); v != "70" {
		t.Errorf("balance %q after refused calls, want 70", v)
	}
}

// With real grants: a holder whose lease lapsed while paused adds to the
// balance after the next holder did, and is refused.
func TestFenceIncrByWithLocks(t *testing.T) {
	srv := startRedis(t)
	ctx, c := testCtx(t), newClient(t, srv.Addr)
	const res = "acct/lapsed"
	balance := "acct:" + redislock.HashTag(res)
	f := redislock.NewFence(c, redislock.DefaultFencePrefix)
	ba, bb := newBackend(t, srv.Addr), newBackend(t, srv.Addr)

	la, err := ba.Acquire(ctx, res, driver.AcquireOptions{TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "A's lease lapses", func() bool { return c.Exists(ctx, lockKey(res)).Val() == 0 })
	lb, err := bb.Acquire(ctx, res, driver.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.IncrBy(ctx, res, lb.Token(), balance, 10); err != nil || n != 10 {
		t.Fatalf("B's IncrBy = %d, %v", n, err)
	}
	if _, err := f.IncrBy(ctx, res, la.Token(), balance, 10); !errors.Is(err, fence.ErrStaleToken) {
		t.Errorf("paused holder's IncrBy: %v, want ErrStaleToken", err)
	}
	if v := c.Get(ctx, balance).Val(); v != "10" {
		t.Errorf("balance %q, want 10", v)
	}
	if err := lb.Release(ctx); err != nil {
		t.Error(err)
	}
	if err := la.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Errorf("A's release: %v, want ErrLockLost", err)
	}
}

func equalReply(got any, want []any) bool {
	g, ok := got.([]any)
	if !ok || len(g) != len(want) {
		return false
	}
	for i := range g {
		if g[i] != want[i] {
			return false
		}
	}
	return true
}
