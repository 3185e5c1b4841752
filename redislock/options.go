package redislock

// The options of New, their defaults, and their validation.

import (
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
)

// DefaultWaiterLiveness is how long a waiter stays in the queue without
// refreshing its place, unless set with WithWaiterLiveness.
const DefaultWaiterLiveness = 3 * time.Second

// minLiveness is the shortest waiter liveness accepted.
const minLiveness = 30 * time.Millisecond

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix          string
	unordered       bool
	liveness        time.Duration
	waitReplicas    int
	waitTimeout     time.Duration
	evictionAllowed bool
}

// WithPrefix sets the prefix of every Redis key and pub/sub channel the
// Backend uses. Default: DefaultPrefix ("distlock:"). It must not contain
// '{' or '}', which would break the hash tags that keep one lock's keys in
// one Cluster slot. Backends sharing locks must use the same prefix.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithUnordered turns the queue off: waiters then race for a released
// lock, in no particular order, within a process as between processes.
// Default: off: waiters queue in Redis in arrival order, a release wakes
// only the first live waiter, and a newcomer (TryAcquire included) cannot
// take a free lock while others wait for it; an Acquire that fails (its
// context ends, or the service is unavailable) leaves the queue, and when
// the Client retries it, it joins again at the back. Its cost: a release wakes every waiter of
// the key and each of them sends a request, so a hand-off costs about one
// request per waiting process (measured on a busy machine: 88 requests
// per hand-off with 64 waiting processes, against 2 with the queue, whose
// release hands the lock on itself), and a waiter can starve while others
// are served many times. What it saves is the queue's bookkeeping in the
// scripts while waiters wait. Every Backend using a key
// must agree on the mode: a Backend with WithUnordered ignores the queue,
// so it can take a lock that queued waiters of other Backends wait for.
func WithUnordered() Option { return func(c *config) { c.unordered = true } }

// WithWaiterLiveness sets how long a queued waiter keeps its place without
// refreshing it. A waiting Acquire refreshes it every third of this time.
// It bounds the delay only for a waiter that stopped without Redis seeing
// its connections close (a stopped process, a vanished host) or on a
// Cluster; a waiter whose process died is otherwise skipped by the release
// that would wake it (see Waiting in the package documentation). Default:
// DefaultWaiterLiveness (3s). It must be at least 30ms.
func WithWaiterLiveness(d time.Duration) Option { return func(c *config) { c.liveness = d } }

// WithWaitReplicas makes every grant wait, with Redis WAIT, until n replicas
// have acknowledged it, for at most timeout; when fewer do, the grant is
// released and Acquire fails with an error matching distlock.ErrUnavailable.
// Default: 0, no waiting.
//
// It narrows the hole of asynchronous replication, where a failover to a
// replica that never received the grant lets a second client take the key.
// It does not close it: WAIT is not consensus, a failover may still promote
// a replica that missed the write, and a restarted primary without fsync
// loses the write anyway. Refreshes and releases are not waited for; a
// grant that a release hands to a queued waiter is, by the waiter's own
// try (one request more per hand-off).
// It requires a *redis.Client (standalone or Sentinel) or a
// *redis.ClusterClient; timeout must be positive.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(c *config) { c.waitReplicas, c.waitTimeout = n, timeout }
}

// WithEvictionAllowed accepts a server whose maxmemory-policy may evict
// keys. Default: off; the first Acquire of a Backend reads the policy with
// CONFIG GET and, unless it is "noeviction", refuses every Acquire with an
// error matching distlock.ErrInvalidOption.
//
// Eviction breaks the lock: an evicted lock key lets a second client be
// granted the key while the first still holds it, and an evicted fencing
// counter restarts tokens at 1. The volatile-* policies evict the lock keys
// (they have a TTL), the allkeys-* policies the counters too. Use this
// option only where the lock is for efficiency and memory never runs out.
func WithEvictionAllowed() Option { return func(c *config) { c.evictionAllowed = true } }

// newConfig applies opts to the defaults and checks the result against
// client.
func newConfig(client redis.UniversalClient, opts []Option) (config, error) {
	c := config{prefix: DefaultPrefix, liveness: DefaultWaiterLiveness}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: redislock: "+format, append([]any{driver.ErrInvalidOption}, args...)...)
	}
	switch cl := client.(type) {
	case nil:
		return c, bad("nil redis client")
	case *redis.Ring:
		return c, bad("*redis.Ring is not supported (its shards do not share pub/sub); use one Backend per shard")
	case *redis.Client, *redis.ClusterClient:
	default:
		if c.waitReplicas > 0 {
			return c, bad("WithWaitReplicas needs a *redis.Client or *redis.ClusterClient, not %T", cl)
		}
	}
	switch {
	case strings.ContainsAny(c.prefix, "{}"):
		return c, bad("prefix %q contains a brace", c.prefix)
	case c.liveness < minLiveness:
		return c, bad("waiter liveness %v is shorter than %v", c.liveness, minLiveness)
	case c.waitReplicas < 0:
		return c, bad("negative replica count %d", c.waitReplicas)
	case c.waitReplicas > 0 && c.waitTimeout <= 0:
		return c, bad("replica wait timeout %v is not positive", c.waitTimeout)
	}
	return c, nil
}
