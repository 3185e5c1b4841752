package redislock

// Fence: writes to data in Redis admitted by fencing token, in one script.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
	case keyTag(key) != tagEscaper.Replace(resource):
		return fmt.Errorf("%w: key %q, resource %q: the key must contain %s", ErrWrongSlot, key, resource, HashTag(resource))
	case token == 0:
		// No grant has token 0: refuse it without touching the server.
		f.rejected.Rejected(ctx)
		return &fence.StaleTokenError{Resource: resource, Token: 0}
	}
	all := append([]any{strconv.FormatUint(token, 10), op}, args...)
	res, err := fenceScript.Run(ctx, f.client, []string{f.key(resource), key}, all...).Slice()
	if err != nil {
		return classify(ctx, "fence "+strconv.Quote(resource), err)
	}
	if len(res) == 1 && res[0] == int64(fenceAdmitted) {
		return nil
	}
	if len(res) == 2 && res[0] == int64(fenceRefused) {
		if s, ok := res[1].(string); ok {
			highest, _ := strconv.ParseUint(s, 10, 64)
			f.rejected.Rejected(ctx)
			return &fence.StaleTokenError{Resource: resource, Token: token, Highest: highest}
		}
	}
	return fmt.Errorf("redislock: fence %q: unexpected reply %v", resource, res)
}
