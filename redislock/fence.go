package redislock

// Fence: writes to data in Redis admitted by fencing token, in one script.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fence"
)

// DefaultFencePrefix is the usual prefix of fence keys (see NewFence).
const DefaultFencePrefix = DefaultPrefix + "fence"

// Fence guards data kept in Redis with fencing tokens: each write carries
// the writer's token, and one Lua script compares it with the highest token
// admitted so far for the resource, refuses a lower one, records it and
// writes, atomically (a paused holder cannot slip a write between the check
// and the write). A token equal to the highest is admitted, so a holder can
// write more than once.
//
// The highest token of resource R lives at the key
// prefix + HashTag(R) + ":fence". Every data key written through a Fence
// must carry HashTag(R) as its hash tag (for example "acct:" +
// HashTag(R) + ":balance"), so that fence and data share a Cluster slot;
// this is checked on every deployment, standalone too, and a key that does
// not carry it is refused with ErrWrongSlot. Fence keys never expire.
//
// Set, HSet and Del write one key; IncrBy adds to an integer; Exec runs a
// list of commands and Eval the caller's own Lua (NewFenceScript), each
// after the token check, in the same script.
//
// A Fence counts the writes it refuses (distlock.fence.rejections,
// distlock.guard "redislock.Fence"; see fence.WithMeterProvider). What it
// does not do: protect writes that bypass it, or order writes of one token
// among themselves. Its methods are safe for concurrent use.
type Fence struct {
	client   redis.Scripter
	prefix   string
	rejected *fence.Counter
}

// NewFence returns a Fence writing through client (any go-redis client,
// including a *redis.ClusterClient, or a pipeline's or transaction's
// underlying client), whose fence keys start with prefix, usually
// DefaultFencePrefix ("distlock:fence"). Every writer of a resource must
// use the same prefix; it must not be empty or contain '{' or '}'.
func NewFence(client redis.Scripter, prefix string, opts ...fence.Option) *Fence {
	return &Fence{client: client, prefix: prefix, rejected: fence.NewCounter("redislock.Fence", opts...)}
}

// key returns the Redis key that holds the highest token admitted for
// resource.
func (f *Fence) key(resource string) string { return f.prefix + HashTag(resource) + suffixFence }

// Set admits token for resource and then sets key to value, with ttl (0:
// no expiry). A token lower than the highest admitted is refused with a
// *fence.StaleTokenError (matching fence.ErrStaleToken) and nothing is
// written.
func (f *Fence) Set(ctx context.Context, resource string, token uint64, key, value string, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: redislock: fence: negative TTL %v", driver.ErrInvalidOption, ttl)
	}
	return f.run(ctx, resource, token, key, "set", value, ceilMillis(ttl))
}

// HSet admits token for resource and then sets the given fields of the hash
// at key. Errors are as for Set; an empty fields map is refused.
func (f *Fence) HSet(ctx context.Context, resource string, token uint64, key string, fields map[string]string) error {
	if len(fields) == 0 {
		return fmt.Errorf("%w: redislock: fence: no fields to set", driver.ErrInvalidOption)
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	slices.Sort(names)
	args := make([]any, 0, 2*len(fields))
	for _, name := range names {
		args = append(args, name, fields[name])
	}
	return f.run(ctx, resource, token, key, "hset", args...)
}

// Del admits token for resource and then deletes key. Errors are as for
// Set.
func (f *Fence) Del(ctx context.Context, resource string, token uint64, key string) error {
	return f.run(ctx, resource, token, key, "del")
}

// IncrBy admits token for resource and then adds delta to the integer at
// key (INCRBY), returning the new value: a fenced update relative to the
// value the key holds, with no read before it to go stale. Errors are as
// for Set, and a key that does not hold an integer fails as Exec says.
func (f *Fence) IncrBy(ctx context.Context, resource string, token uint64, key string, delta int64) (int64, error) {
	res, err := f.Exec(ctx, resource, token, []any{"incrby", key, delta})
	if err != nil {
		return 0, err
	}
	n, ok := res[0].(int64)
	if !ok {
		return 0, fmt.Errorf("redislock: fence %q: INCRBY replied %v", resource, res[0])
	}
	return n, nil
}

// Exec admits token for resource and then runs cmds, in order, in the same
// script: each command is written as for go-redis's Do, its name and then
// its arguments, the first of which must be its key, a data key of the
// resource (carrying HashTag(resource), see Fence). It returns the
// commands' replies, in order (nil for a nil reply).
//
// Only each command's first argument is checked as a key: a command that
// names more keys (RENAME, LMOVE, ...) must keep the others in the
// resource's slot too, or use Eval, which checks all its keys. A command
// that fails (INCRBY on a value that is not an integer, say) ends the
// script with an error that matches ErrFencedScript, after the commands
// before it ran: Redis does not undo their writes, and the token stays
// admitted. A stale token is refused as by Set, before any command runs.
func (f *Fence) Exec(ctx context.Context, resource string, token uint64, cmds ...[]any) ([]any, error) {
	if len(cmds) == 0 {
		return nil, fmt.Errorf("%w: redislock: fence: no commands", driver.ErrInvalidOption)
	}
	keys := make([]string, len(cmds))
	var args []any
	for i, cmd := range cmds {
		if len(cmd) < 2 {
			return nil, fmt.Errorf("%w: redislock: fence: command %d has no key (want name, key, arguments...)", driver.ErrInvalidOption, i)
		}
		name, ok := cmd[0].(string)
		if !ok || name == "" {
			return nil, fmt.Errorf("%w: redislock: fence: command %d: name %v is not a string", driver.ErrInvalidOption, i, cmd[0])
		}
		if keys[i], ok = cmd[1].(string); !ok {
			return nil, fmt.Errorf("%w: redislock: fence: command %d (%s): key %v is not a string", driver.ErrInvalidOption, i, name, cmd[1])
		}
		args = append(args, len(cmd)-1, name)
		args = append(args, cmd[2:]...)
	}
	res, err := f.Eval(ctx, resource, token, fenceExecScript(), keys, args...)
	if err != nil {
		return nil, err
	}
	out, ok := res.([]any)
	if !ok || len(out) != len(cmds) {
		return nil, fmt.Errorf("redislock: fence %q: unexpected reply %v", resource, res)
	}
	return out, nil
}

// ErrFencedScript is matched by the error of a fenced script (Eval, Exec,
// IncrBy) that was admitted and then failed: its body raised an error or
// returned one (redis.error_reply), or changed the fence key. Writes the
// script made before failing stay, since Redis does not undo them.
var ErrFencedScript = errors.New("redislock: fenced script failed after its token was admitted")

// FenceScript is a Lua body that a Fence runs after admitting a token, in
// the same script (see Eval). Make one with NewFenceScript, once, and use
// it from any goroutine.
type FenceScript struct {
	script *redis.Script
}

// bodyMarker is the line of fence_eval.lua where a FenceScript's body goes.
const bodyMarker = "--[[body]]\n"

// bodyLine is the line of a script where its body starts.
var bodyLine = strings.Count(fenceEvalLua[:strings.Index(fenceEvalLua, bodyMarker)], "\n") + 1

// fenceExecScript is Exec's body, built on first use (see scripts.go).
var fenceExecScript = sync.OnceValue(func() *FenceScript { return NewFenceScript(fenceExecLua) })

// NewFenceScript returns the script that runs body, Lua, after a Fence's
// token check (see Eval). The body sees the caller's KEYS and ARGV, the
// keys and arguments given to Eval (neither the fence key nor the token);
// it calls Redis with redis.call as any script does, and what it returns
// is Eval's result. A body that refuses to write, say for want of funds,
// returns redis.error_reply(msg) before writing. It is sent to the server
// inside a Lua function, whole: a body is the caller's code, as trusted as
// any code that holds a Redis client (see Eval for what the Fence checks).
func NewFenceScript(body string) *FenceScript {
	src := strings.Replace(fenceEvalLua, bodyMarker, body+"\n", 1)
	return &FenceScript{script: redis.NewScript(src)}
}

// Eval admits token for resource and then runs script with keys and args
// as its KEYS and ARGV, in one Lua script, atomically: no write of another
// client comes between the check and the body. A token lower than the
// highest admitted is refused with a *fence.StaleTokenError (matching
// fence.ErrStaleToken), and the body does not run. It returns what the
// body returned, as go-redis converts Lua values (int64, string, []any,
// nil for nil or false).
//
// What a body cannot do: run before the check (it is a function that the
// script calls after it), or see the fence key among its KEYS. Each of
// keys must carry HashTag(resource) (ErrWrongSlot otherwise) and must not
// be the fence key (distlock.ErrInvalidOption). A body that changes the
// fence key anyway, by its name, finds it set back to the admitted token
// when it returns, and Eval reports ErrFencedScript. A body that fails
// (a Redis error, a Lua error, or a returned redis.error_reply) makes Eval
// return an error matching ErrFencedScript that carries the body's
// message; its writes before the failure stay, as in any Redis script, and
// the token stays admitted.
func (f *Fence) Eval(ctx context.Context, resource string, token uint64, script *FenceScript, keys []string, args ...any) (any, error) {
	if script == nil || script.script == nil {
		return nil, fmt.Errorf("%w: redislock: fence: nil script (use NewFenceScript)", driver.ErrInvalidOption)
	}
	if err := f.check(ctx, resource, token, keys...); err != nil {
		return nil, err
	}
	all := make([]any, 0, 1+len(args))
	all = append(append(all, strconv.FormatUint(token, 10)), args...)
	res, err := script.script.Run(ctx, f.client, append([]string{f.key(resource)}, keys...), all...).Slice()
	switch {
	case redis.HasErrorPrefix(err, fenceBodyFailed), redis.HasErrorPrefix(err, fenceKeyChanged):
		msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(err.Error(), fenceBodyFailed), fenceKeyChanged))
		return nil, fmt.Errorf("%w: resource %q, token %d: %s", ErrFencedScript, resource, token, msg)
	case redis.HasErrorPrefix(err, "Error compiling script"):
		// Nothing ran. Redis numbers the lines of the whole script.
		return nil, fmt.Errorf("%w: redislock: fence %q: the script does not compile (its body starts at line %d): %w",
			driver.ErrInvalidOption, resource, bodyLine, err)
	case err != nil:
		return nil, classify(ctx, "fence "+strconv.Quote(resource), err)
	case len(res) >= 1 && res[0] == int64(fenceAdmitted) && len(res) <= 2:
		if len(res) == 1 {
			return nil, nil
		}
		return res[1], nil
	}
	return nil, f.refused(ctx, resource, token, res)
}

// Highest returns the highest token admitted for resource, 0 if none.
func (f *Fence) Highest(ctx context.Context, resource string) (uint64, error) {
	c, ok := f.client.(redis.StringCmdable)
	if !ok {
		return 0, fmt.Errorf("redislock: fence: client %T cannot GET", f.client)
	}
	v, err := c.Get(ctx, f.key(resource)).Result()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, classify(ctx, "fence", err)
	}
	return strconv.ParseUint(v, 10, 64)
}

func (f *Fence) run(ctx context.Context, resource string, token uint64, key, op string, args ...any) error {
	if err := f.check(ctx, resource, token, key); err != nil {
		return err
	}
	all := append([]any{strconv.FormatUint(token, 10), op}, args...)
	res, err := fenceScript().Run(ctx, f.client, []string{f.key(resource), key}, all...).Slice()
	if err != nil {
		return classify(ctx, "fence "+strconv.Quote(resource), err)
	}
	if len(res) == 1 && res[0] == int64(fenceAdmitted) {
		return nil
	}
	return f.refused(ctx, resource, token, res)
}

// check refuses a call before it reaches the server: a Fence or resource
// that cannot be right, a data key outside the resource's slot or equal to
// its fence key, and token 0, which no grant has.
func (f *Fence) check(ctx context.Context, resource string, token uint64, keys ...string) error {
	switch {
	case f.client == nil:
		return fmt.Errorf("%w: redislock: fence: nil redis client", driver.ErrInvalidOption)
	case f.prefix == "":
		// Writers that share a resource must share its fence key: an
		// empty prefix is almost surely one that meant the default.
		return fmt.Errorf("%w: redislock: fence: empty prefix (DefaultFencePrefix is the usual one)", driver.ErrInvalidOption)
	case strings.ContainsAny(f.prefix, "{}"):
		return fmt.Errorf("%w: redislock: fence: prefix %q contains a brace", driver.ErrInvalidOption, f.prefix)
	case resource == "":
		return fmt.Errorf("%w: redislock: fence: empty resource", driver.ErrInvalidOption)
	}
	for _, key := range keys {
		switch {
		case keyTag(key) != tagEscaper.Replace(resource):
			return fmt.Errorf("%w: key %q, resource %q: the key must contain %s", ErrWrongSlot, key, resource, HashTag(resource))
		case key == f.key(resource):
			return fmt.Errorf("%w: redislock: fence: key %q is the fence key of resource %q", driver.ErrInvalidOption, key, resource)
		}
	}
	if token == 0 {
		// No grant has token 0: refuse it without touching the server.
		f.rejected.Rejected(ctx)
		return &fence.StaleTokenError{Resource: resource, Token: 0}
	}
	return nil
}

// refused returns the error of a script's reply res other than an
// admission: a *fence.StaleTokenError for a refusal, counted.
func (f *Fence) refused(ctx context.Context, resource string, token uint64, res []any) error {
	if len(res) == 2 && res[0] == int64(fenceRefused) {
		if s, ok := res[1].(string); ok {
			highest, _ := strconv.ParseUint(s, 10, 64)
			f.rejected.Rejected(ctx)
			return &fence.StaleTokenError{Resource: resource, Token: token, Highest: highest}
		}
	}
	return fmt.Errorf("redislock: fence %q: unexpected reply %v", resource, res)
}
