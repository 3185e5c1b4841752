package redislock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redact"
)

// Hooks for this package's tests, to force interleavings that the network
// rarely produces on its own. Set them before b's first Acquire.

// SetWaitHooks makes b's waiting Acquire calls run afterFirstHeld when a
// first try found the key held, just before subscribing to its channel,
// and beforeSleep just before sleeping until a release message or the
// fallback timer. Either may be nil.
func SetWaitHooks(b *Backend, afterFirstHeld, beforeSleep func()) {
	b.hooks.afterFirstHeld, b.hooks.beforeSleep = afterFirstHeld, beforeSleep
}

// SetNoRecheck makes b's waiters skip the try that follows a new
// subscription, to show the window that try closes.
func SetNoRecheck(b *Backend) { b.hooks.noRecheck = true }

// SetAbandonHook makes b run h when a try has failed, just before its
// clean-up is sent.
func SetAbandonHook(b *Backend, h func()) { b.hooks.beforeAbandon = h }

// SetLinger replaces subscriptionLinger for b.
func SetLinger(b *Backend, d time.Duration) { b.hooks.linger = d }

// QueueCycle queues on pipe the requests of an uncontended acquire of key
// (with ttl) and its release, as b sends them, for measuring the server's
// share of a cycle without the network's.
func QueueCycle(ctx context.Context, b *Backend, pipe redis.Pipeliner, key string, ttl time.Duration) {
	a := b.newAttempt(key, driver.AcquireOptions{TTL: ttl})
	args := a.acquireArgs(false)
	args[0], args[1] = "evalsha", acquireScript().hash
	pipe.Process(ctx, redis.NewCmd(ctx, args...))
	args = b.releaseArgs(&a.args, nil, 0)
	args[0], args[1] = "evalsha", releaseScript().hash
	pipe.Process(ctx, redis.NewCmd(ctx, args...))
}

// LoadScripts loads b's scripts into the server's cache.
func LoadScripts(ctx context.Context, c redis.Scripter) error {
	for _, s := range []*redis.Script{acquireScript().Script, releaseScript().Script, refreshScript()} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return err
		}
	}
	return nil
}

// WakeChannel is the pub/sub channel on which b's queued waiters are woken.
func WakeChannel(b *Backend) string { return b.wakeChannel }

// LeaseSecret is the secret of a lease of this package: a lock's, shared
// or not, or a permit's.
func LeaseSecret(l driver.Lease) string {
	if p, ok := l.(*permit); ok {
		return reveal(p.a.secret)
	}
	return reveal(l.(*lease).k.secret)
}

// reveal returns the bytes that go-redis writes for s.
func reveal(s redact.Secret) string {
	b, _ := s.MarshalBinary()
	return string(b)
}

// TryWithSecret runs one try of an attempt on key whose secret is secret,
// and says how it ended: "granted" (the grant is released again), "held",
// "not first", "too late" or the error.
func TryWithSecret(ctx context.Context, b *Backend, key, secret string, opts driver.AcquireOptions) string {
	a := b.newAttempt(key, opts)
	a.k = b.keysFor(key, []byte(secret))
	a.args = boxArgs(&a.k)
	l, r, err := a.try(ctx, false)
	switch {
	case errors.Is(err, errTooLate):
		return "too late"
	case err != nil:
		return err.Error()
	case l != nil:
		_ = l.Release(ctx)
		return "granted"
	}
	return r.why
}

// SetRemarkPeriod replaces how often b's watches set their markers again.
func SetRemarkPeriod(b *Backend, d time.Duration) { b.hooks.remark = d }

// CycleArgs returns the arguments of an uncontended try of key (with
// ttl) and of its release, as b sends them after the command's name and
// the script's hash (numkeys, the keys, the arguments): for running
// variants of the scripts on them.
func CycleArgs(b *Backend, key string, ttl time.Duration) (acquire, release []any) {
	a := b.newAttempt(key, driver.AcquireOptions{TTL: ttl})
	return a.acquireArgs(false)[2:], b.releaseArgs(&a.args, nil, 0)[2:]
}

// AcquireHash and ReleaseHash are the SHA-1 of the acquire and release
// scripts, as EVALSHA names them.
func AcquireHash() string { return acquireScript().Hash() }

// ReleaseHash: see AcquireHash.
func ReleaseHash() string { return releaseScript().Hash() }
