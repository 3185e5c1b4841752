package redislock

// The Backend: what it holds, New and Close.

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Backend        = (*Backend)(nil)
	_ driver.BatchRefresher = (*Backend)(nil)
	_ driver.Lister         = (*Backend)(nil)
	_ driver.Lease          = (*lease)(nil)
)

// Backend is a driver.Backend over Redis: a single server, a Sentinel
// failover client or a Cluster, through a go-redis client. Create it with New;
// it is safe for concurrent use.
//
// See the package documentation for what it guarantees and what it does not.
type Backend struct {
	client     redis.UniversalClient
	cfg        config
	ownsClient bool // Close also closes client (OpenURL)

	// The queue's wake-ups: a release publishes a waiter's id on the
	// channel of the waiter's Backend, prefix + "waiters:" + id. Every
	// waiter id of this Backend starts with id + ":".
	id          string
	wakeChannel string

	// Script arguments that are the same for every call, converted to
	// interface values once: the flags of acquire.lua (a single try, a
	// waiting try) and release.lua (a release, an abandon), and the
	// liveness. millisArg keeps the last TTL converted (a Client passes
	// the same one every time).
	acquireFlags [2]any
	releaseFlags [2]any
	// sharedFlags and sharedReleaseFlags are those of shared_acquire.lua
	// (a try, a waiting try) and shared_release.lua (a release, an
	// abandon): "c" on a single server only.
	sharedFlags        [2]any
	sharedReleaseFlags [2]any
	livenessArg        any
	lastTTL            atomic.Pointer[cachedTTL]

	// mu guards closed and sub; closing is cancelled with closed set, and
	// wg counts the clean-ups retried in the background (see abandon) and
	// the watches' goroutines (WatchHolder), which Close waits for.
	mu      sync.Mutex
	closed  bool
	closing context.Context
	stop    context.CancelFunc // cancels closing
	sub     *subscriber        // created with the first waiter that needs it
	wg      sync.WaitGroup

	// The eviction policy check (see WithEvictionAllowed): policyOK is set
	// once a check passed or could not be made; policyMu makes concurrent
	// first calls wait for one check.
	policyOK atomic.Bool
	policyMu sync.Mutex

	noBatch atomic.Bool // the server refused a multi-key refresh (cluster mode)

	hooks testHooks
}

type cachedTTL struct {
	ttl time.Duration
	arg any
}

// millisArg returns ceilMillis(ttl) as an interface value.
func (b *Backend) millisArg(ttl time.Duration) any {
	if p := b.lastTTL.Load(); p != nil && p.ttl == ttl {
		return p.arg
	}
	p := &cachedTTL{ttl: ttl, arg: ceilMillis(ttl)}
	b.lastTTL.Store(p)
	return p.arg
}

// testHooks let this package's tests force interleavings; all nil/zero
// outside tests.
type testHooks struct {
	afterFirstHeld func()        // a first try found the key held; the waiter is about to subscribe
	beforeSleep    func()        // the waiter is about to sleep until a message or its timer
	noRecheck      bool          // skip the try after a new subscription is confirmed
	linger         time.Duration // replaces subscriptionLinger when not zero
	beforeAbandon  func()        // a try failed; its clean-up is about to be sent
	remark         time.Duration // replaces a watch's re-mark period when not zero
}

// New returns a Backend that keeps its locks in the Redis that client talks
// to. The client stays the caller's: Close does not close it.
//
// New does no I/O. A nil client, a *redis.Ring (its shards do not share
// pub/sub) or an invalid option gets an error matching
// distlock.ErrInvalidOption.
func New(client redis.UniversalClient, opts ...Option) (*Backend, error) {
	cfg, err := newConfig(client, opts)
	if err != nil {
		return nil, err
	}
	b := &Backend{client: client, cfg: cfg, id: rand.Text(), livenessArg: ceilMillis(cfg.liveness)}
	b.wakeChannel = cfg.prefix + wakeSuffix + b.id
	// With the queue ("q"), and when PUBLISH counts every subscriber
	// ("c": a single server, not a Cluster, whose PUBLISH counts those of
	// one node), so that a release can skip a waiter whose Backend nobody
	// hears. "j" is a waiting try, "f" an abandon (see the scripts).
	var mode string
	if !cfg.unordered {
		mode = "q"
		if _, ok := client.(*redis.Client); ok {
			mode += "c"
		}
	}
	b.acquireFlags = [2]any{mode, mode + "j"}
	b.releaseFlags = [2]any{mode, mode + "f"}
	var counted string
	if _, ok := client.(*redis.Client); ok {
		counted = "c"
	}
	b.sharedFlags = [2]any{counted, counted + "j"}
	b.sharedReleaseFlags = [2]any{counted, counted + "f"}
	b.closing, b.stop = context.WithCancel(context.Background())
	return b, nil
}

// Close stops what the Backend started: its pub/sub connection, its
// goroutines (the watches' among them) and any clean-up still being retried (a lock whose clean-up is
// abandoned that way lapses by its TTL). Waiting Acquire calls return an
// error matching ErrClosed. Leases keep working: they can still be refreshed
// and released. Close does not close the redis client given to New; a
// Backend from OpenURL closes the client it created. Close is idempotent.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.stop()
	sub := b.sub
	b.mu.Unlock()
	var err error
	if sub != nil {
		err = sub.close()
	}
	b.wg.Wait()
	if b.ownsClient {
		err = errors.Join(err, b.client.Close())
	}
	return err
}

func (b *Backend) isClosed() bool { return b.closing.Err() != nil }

// subscriber returns the Backend's pub/sub multiplexer, creating it.
func (b *Backend) subscriber() (*subscriber, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.sub == nil {
		linger := subscriptionLinger
		if b.hooks.linger > 0 {
			linger = b.hooks.linger
		}
		b.sub = newSubscriber(b.client, linger)
	}
	return b.sub, nil
}

// currentSubscriber returns the Backend's pub/sub multiplexer if it exists.
func (b *Backend) currentSubscriber() *subscriber {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	return b.sub
}
