package redislock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
)

var (
	_ distlock.Backend        = (*Backend)(nil)
	_ distlock.BatchRefresher = (*Backend)(nil)
	_ distlock.Lister         = (*Backend)(nil)
	_ distlock.Lease          = (*lease)(nil)
)

// Defaults of the options. Each option's comment repeats its default.
const (
	// DefaultWaiterLiveness is how long a fair-mode waiter stays in the
	// queue without refreshing its place; see WithWaiterLiveness.
	DefaultWaiterLiveness = 3 * time.Second

	// TombstoneTTL is how long a release is remembered, so that a release
	// retried after a lost reply is reported as done rather than lost. It
	// covers a Client's retries of a release (backoff capped at a second);
	// a release retried later than this after the one that took effect is
	// reported as lost (distlock.ErrLockLost).
	TombstoneTTL = 10 * time.Second

	// SubscriptionLinger is how long a release channel stays subscribed
	// after its last waiter left, so that a chain of hand-offs on one key
	// (each new waiter arriving while the previous one holds it) does not
	// subscribe and unsubscribe per waiter.
	SubscriptionLinger = time.Second
)

const (
	// subscribeWait bounds how long a waiter waits for its channel
	// subscription to be confirmed before trying anyway.
	subscribeWait = 2 * time.Second
	// commandTimeout bounds the clean-up commands sent on a caller's behalf
	// after its own context ended.
	commandTimeout = 2 * time.Second
	// noExpiryPoll is the fallback re-check interval while the lock key has
	// no expiry (set by something else than this package).
	noExpiryPoll = time.Second
	// minLiveness is the shortest waiter liveness accepted.
	minLiveness = 30 * time.Millisecond
)

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix          string
	fair            bool
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

// WithFair turns on FIFO fair mode: waiters form a queue kept in Redis, a
// release wakes only the first live waiter, and a newcomer (TryAcquire
// included) cannot take a free lock while others wait for it. Default:
// off; waiters then race for a released lock, all retrying at once.
// Every Backend using a key must agree on the mode: a Backend not in fair
// mode ignores the queue. An Acquire that fails (its context ends, or the
// service is unavailable) leaves the queue; when the Client retries it, it
// joins again at the back.
func WithFair() Option { return func(c *config) { c.fair = true } }

// WithWaiterLiveness sets, in fair mode, how long a waiter keeps its place
// in the queue without refreshing it. A waiting Acquire refreshes it every
// third of this time; a waiter whose process died is skipped once it
// lapses, so it delays the queue by at most about this long. Default:
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
// loses the write anyway. Refreshes and releases are not waited for.
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

// Backend is a distlock.Backend over Redis: a single server, a Sentinel
// failover client or a Cluster, through a go-redis client. Create it with New;
// it is safe for concurrent use.
//
// See the package documentation for what it guarantees and what it does not.
type Backend struct {
	client     redis.UniversalClient
	cfg        config
	err        error // a configuration error, returned by every call
	ownsClient bool  // Close also closes client (OpenURL)

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close
	sub    *subscriber   // created with the first waiter
	wg     sync.WaitGroup

	// The eviction policy check (see WithEvictionAllowed): policyOK is set
	// once a check passed or could not be made; policyMu makes concurrent
	// first calls wait for one check.
	policyOK atomic.Bool
	policyMu sync.Mutex

	noBatch atomic.Bool // the server refused a multi-key refresh (cluster mode)

	hooks testHooks
}

// testHooks let this package's tests force interleavings; all nil/zero
// outside tests.
type testHooks struct {
	afterFirstHeld func()        // a first try found the key held; the waiter is about to subscribe
	beforeSleep    func()        // the waiter is about to sleep until a message or its timer
	noRecheck      bool          // skip the try after a new subscription is confirmed
	linger         time.Duration // replaces SubscriptionLinger when not zero
}

// New returns a Backend that keeps its locks in the Redis that client talks
// to. The client stays the caller's: Close does not close it.
//
// New does no I/O. An invalid option or a nil client is reported by every
// later call, with an error matching distlock.ErrInvalidOption. A *redis.Ring
// is refused that way too: its shards do not share pub/sub.
func New(client redis.UniversalClient, opts ...Option) *Backend {
	cfg := config{prefix: DefaultPrefix, liveness: DefaultWaiterLiveness}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	b := &Backend{client: client, cfg: cfg, done: make(chan struct{})}
	b.err = b.validate()
	return b
}

func (b *Backend) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: redislock: "+format, append([]any{distlock.ErrInvalidOption}, args...)...)
	}
	c := b.cfg
	switch cl := b.client.(type) {
	case nil:
		return bad("nil redis client")
	case *redis.Ring:
		return bad("*redis.Ring is not supported (its shards do not share pub/sub); use one Backend per shard")
	case *redis.Client, *redis.ClusterClient:
	default:
		if c.waitReplicas > 0 {
			return bad("WithWaitReplicas needs a *redis.Client or *redis.ClusterClient, not %T", cl)
		}
	}
	switch {
	case strings.ContainsAny(c.prefix, "{}"):
		return bad("prefix %q contains a brace", c.prefix)
	case c.liveness < minLiveness:
		return bad("waiter liveness %v is shorter than %v", c.liveness, minLiveness)
	case c.waitReplicas < 0:
		return bad("negative replica count %d", c.waitReplicas)
	case c.waitReplicas > 0 && c.waitTimeout <= 0:
		return bad("replica wait timeout %v is not positive", c.waitTimeout)
	}
	return nil
}

// Close stops what the Backend started: its pub/sub connection, its
// goroutines and any clean-up still being retried (a lock whose clean-up is
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
	close(b.done)
	sub := b.sub
	b.mu.Unlock()
	var err error
	if sub != nil {
		err = sub.close()
	}
	b.wg.Wait()
	if b.ownsClient && b.client != nil {
		err = errors.Join(err, b.client.Close())
	}
	return err
}

// subscriber returns the Backend's pub/sub multiplexer, creating it.
func (b *Backend) subscriber() (*subscriber, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	if b.sub == nil {
		linger := SubscriptionLinger
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

func (b *Backend) isClosed() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// Acquire implements distlock.Backend. The try is one round trip (one Lua
// script sets the lock and increments its fencing counter). A waiting
// Acquire whose first try finds the key held subscribes to the key's
// release channel, tries again once the subscription is confirmed, then
// waits for a release message or for the holder's TTL to run out. The first
// Acquire of a Backend also checks the server's eviction policy (see
// WithEvictionAllowed).
func (b *Backend) Acquire(ctx context.Context, key string, opts distlock.AcquireOptions) (distlock.Lease, error) {
	if b.err != nil {
		return nil, b.err
	}
	if err := distlock.ValidateKey(key); err != nil {
		return nil, err
	}
	if opts.TTL <= 0 || opts.TTL > distlock.MaxTTL {
		return nil, fmt.Errorf("%w: redislock: TTL %v is not in (0, %v]", distlock.ErrInvalidOption, opts.TTL, distlock.MaxTTL)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", distlock.ErrNotAcquired, context.Cause(ctx))
	}
	if b.isClosed() {
		return nil, ErrClosed
	}
	if err := b.checkEviction(ctx); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", distlock.ErrNotAcquired, err)
		}
		return nil, err
	}
	a := &attempt{b: b, key: key, k: b.keysFor(key), secret: rand.Text(), opts: opts}
	if b.cfg.fair {
		a.waiter = rand.Text()
	}
	if !opts.Wait {
		l, _, err := a.try(ctx, false)
		if err != nil {
			return nil, err
		}
		if l == nil {
			return nil, fmt.Errorf("%w: %q is held", distlock.ErrNotAcquired, key)
		}
		return l, nil
	}
	return a.wait(ctx)
}

// attempt is one Acquire call.
type attempt struct {
	b      *Backend
	key    string
	k      lockKeys
	secret string // the grant's owner value, unguessable
	waiter string // fair mode: the waiter's id in the queue
	opts   distlock.AcquireOptions
}

// try runs the acquire script once. It returns the lease when granted, or
// how long to wait before trying again when not.
func (a *attempt) try(ctx context.Context, join bool) (*lease, time.Duration, error) {
	b := a.b
	keys, args := a.acquireArgs(join)

	sent := time.Now()
	var (
		res      []any
		err      error
		replicas int64 = -1
		waitErr  error
	)
	if b.cfg.waitReplicas > 0 {
		res, replicas, waitErr, err = b.acquireReplicated(ctx, keys, args)
	} else {
		res, err = acquireScript.Run(ctx, b.client, keys, args...).Slice()
	}
	if err != nil {
		// The script may have run although its reply was lost: never leave
		// a grant (or a place in the queue) behind.
		a.abandon(ctx, sent)
		return nil, 0, classify(ctx, "acquire "+strconv.Quote(a.key), err)
	}
	status, val, err := parseAcquireReply(res)
	if err != nil {
		a.abandon(ctx, sent)
		return nil, 0, fmt.Errorf("redislock: acquire %q: %w", a.key, err)
	}
	switch status {
	case 1:
		l := &lease{b: b, key: a.key, k: a.k, secret: a.secret, token: uint64(val),
			validity: distlock.Validity{Sent: sent, TTL: a.opts.TTL}}
		if b.cfg.waitReplicas > 0 && (waitErr != nil || replicas < int64(b.cfg.waitReplicas)) {
			a.abandon(ctx, sent)
			if waitErr != nil {
				return nil, 0, classify(ctx, "acquire "+strconv.Quote(a.key)+": WAIT", waitErr)
			}
			return nil, 0, fmt.Errorf("%w: redislock: acquire %q: %d of %d replicas acknowledged the grant within %v; released it",
				distlock.ErrUnavailable, a.key, replicas, b.cfg.waitReplicas, b.cfg.waitTimeout)
		}
		return l, 0, nil
	case 0: // held; val is its PTTL
		if val < 0 {
			return nil, noExpiryPoll, nil
		}
		return nil, time.Duration(val+1) * time.Millisecond, nil
	default: // free, but another waiter is first; val is its liveness left
		return nil, time.Duration(max(val, 1)) * time.Millisecond, nil
	}
}

// acquireArgs are the keys and arguments of acquire.lua for one try.
func (a *attempt) acquireArgs(join bool) ([]string, []any) {
	joinArg := "0"
	if join {
		joinArg = "1"
	}
	return []string{a.k.lock, a.k.token, a.k.queue, a.k.alive, a.k.tomb(a.secret)},
		[]any{a.secret, ceilMillis(a.opts.TTL), a.opts.Owner, a.waiter, ceilMillis(a.b.cfg.liveness), joinArg}
}

func parseAcquireReply(res []any) (status, val int64, err error) {
	if len(res) != 2 {
		return 0, 0, fmt.Errorf("unexpected reply %v", res)
	}
	s, ok1 := res[0].(int64)
	v, ok2 := res[1].(int64)
	if !ok1 || !ok2 || s < 0 || s > 2 || (s == 1 && v <= 0) {
		return 0, 0, fmt.Errorf("unexpected reply %v", res)
	}
	return s, v, nil
}

// acquireReplicated runs the acquire script and then WAIT on one connection
// of the key's primary.
func (b *Backend) acquireReplicated(ctx context.Context, keys []string, args []any) (res []any, replicas int64, waitErr, err error) {
	var node *redis.Client
	switch c := b.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		if node, err = c.MasterForKey(ctx, keys[0]); err != nil {
			return nil, 0, nil, err
		}
	}
	conn := node.Conn()
	defer conn.Close()
	if res, err = acquireScript.Run(ctx, conn, keys, args...).Slice(); err != nil {
		return nil, 0, nil, err
	}
	if len(res) > 0 && res[0] == int64(1) {
		replicas, waitErr = conn.Wait(ctx, b.cfg.waitReplicas, b.cfg.waitTimeout).Result()
	}
	return res, replicas, waitErr, nil
}

// wait is a blocking Acquire: try; when held, subscribe to the release
// channel and try again once subscribed (a release between the first try
// and the subscription was not heard); then wait for a release message or
// the holder's expiry, and try again.
//
// When the channel is already subscribed (other waiters on the key, or a
// subscription lingering after the last one), the waiter registers first,
// which costs no request, and its first try is then covered.
func (a *attempt) wait(ctx context.Context) (distlock.Lease, error) {
	b := a.b
	var (
		sub *subscriber
		w   *waiter
	)
	defer func() {
		if w != nil {
			sub.remove(w)
		}
	}()
	if sub = b.currentSubscriber(); sub != nil {
		w = sub.addIfSubscribed(a.k.channel, a.waiter)
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if err := a.interrupted(ctx); err != nil {
			return nil, err
		}
		if w != nil {
			w.tried.Store(true)
		}
		l, retryIn, err := a.try(ctx, true)
		if err != nil || l != nil {
			if err != nil && ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", distlock.ErrNotAcquired, err)
			}
			return l, err
		}
		if w == nil {
			if h := b.hooks.afterFirstHeld; h != nil {
				h()
			}
			if sub == nil {
				if sub, err = b.subscriber(); err != nil {
					if a.waiter != "" {
						a.leaveQueue(ctx)
					}
					return nil, err
				}
			}
			// Wait for the confirmation, unless no SUBSCRIBE could be
			// sent (the client is closed, the server unreachable): none is
			// coming then, so try again at once and rely on the timer. A
			// fair waiter, queued by its first try, waits no longer than
			// its place's refresh period.
			readyWait := subscribeWait
			if b.cfg.fair {
				readyWait = min(readyWait, b.cfg.liveness/3)
			}
			var subErr error
			if w, subErr = sub.add(a.k.channel, a.waiter); subErr == nil {
				ready := time.NewTimer(readyWait)
				select {
				case <-w.st.ready:
				case <-ready.C:
				case <-ctx.Done():
				case <-b.done:
				}
				ready.Stop()
			}
			if !b.hooks.noRecheck {
				continue
			}
		}
		if b.cfg.fair {
			// Trying again also refreshes our place in the queue.
			retryIn = min(retryIn, b.cfg.liveness/3)
		}
		if h := b.hooks.beforeSleep; h != nil {
			h()
		}
		timer.Reset(retryIn)
		select {
		case <-w.wake:
		case <-timer.C:
		case <-ctx.Done():
		case <-b.done:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// interrupted reports the end of ctx or of the Backend, leaving the queue.
func (a *attempt) interrupted(ctx context.Context) error {
	var err error
	switch {
	case ctx.Err() != nil:
		err = fmt.Errorf("%w: %w", distlock.ErrNotAcquired, context.Cause(ctx))
	case a.b.isClosed():
		err = ErrClosed
	default:
		return nil
	}
	if a.waiter != "" {
		a.leaveQueue(ctx)
	}
	return err
}

// leaveQueue takes a fair waiter out of the queue (waking the next waiter
// if it was first and the lock is free). If that fails, its liveness lapses.
func (a *attempt) leaveQueue(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandTimeout)
	defer cancel()
	_, _ = a.b.runRelease(cctx, a.k, a.secret, a.waiter, 0)
}

// abandon undoes whatever a failed try may have done at the server: a grant
// whose reply was lost, a place in the queue. It also leaves the tombstone
// of the attempt's secret, whatever it finds, so that a try still on its way
// (delayed in the network, not lost) does nothing when it arrives: without
// it, that late try would grant the key to nobody for a whole TTL. It tries
// at once and, if that fails too, keeps trying in the background until the
// grant would have lapsed anyway or the Backend is closed.
func (a *attempt) abandon(ctx context.Context, sent time.Time) {
	b := a.b
	// The tombstone outlives anything the late try could leave: a grant
	// (TTL), a place in the queue (liveness).
	keep := max(a.opts.TTL, b.cfg.liveness, TombstoneTTL)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandTimeout)
	_, err := b.runRelease(cctx, a.k, a.secret, a.waiter, keep)
	cancel()
	if err == nil {
		return
	}
	until := sent.Add(max(a.opts.TTL, b.cfg.liveness))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for backoff := 10 * time.Millisecond; time.Now().Before(until); backoff = min(2*backoff, time.Second) {
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-b.done:
				t.Stop()
				return
			}
			cctx, cancel := context.WithDeadline(context.Background(), until)
			_, err := b.runRelease(cctx, a.k, a.secret, a.waiter, keep)
			cancel()
			if err == nil || !errors.Is(err, distlock.ErrUnavailable) {
				return
			}
		}
	}()
}

// runRelease runs the release script: it releases the grant with secret if
// held, and takes waiter (if not "") out of the queue. It returns 1 when it
// released, 2 when an earlier call had, 0 when the grant was not held. With
// abandon > 0 it writes the tombstone of secret in any case, to last that
// long.
func (b *Backend) runRelease(ctx context.Context, k lockKeys, secret, waiter string, abandon time.Duration) (int64, error) {
	keys, args := b.releaseArgs(k, secret, waiter, abandon)
	n, err := releaseScript.Run(ctx, b.client, keys, args...).Int64()
	return n, classify(ctx, "release", err)
}

// releaseArgs are the keys and arguments of release.lua.
func (b *Backend) releaseArgs(k lockKeys, secret, waiter string, abandon time.Duration) ([]string, []any) {
	fair, force, keep := "0", "0", TombstoneTTL
	if b.cfg.fair {
		fair = "1"
	}
	if abandon > 0 {
		force, keep = "1", abandon
	}
	return []string{k.lock, k.tomb(secret), k.queue, k.alive},
		[]any{secret, ceilMillis(keep), k.channel, fair, waiter, force}
}

// refreshBatch is the most leases refresh_many.lua refreshes in one call:
// a call of that size keeps the server busy for about a millisecond.
const refreshBatch = 256

// RefreshAll implements distlock.BatchRefresher: it refreshes every lease
// in one pipeline (one round trip on a single server; one per node that
// holds some of the keys on a Cluster). Over a *redis.Client (a single
// server, or a Sentinel-managed primary) one script call refreshes up to
// 256 leases; on a Cluster, whose lock keys lie in different slots, each
// lease is one call.
func (b *Backend) RefreshAll(ctx context.Context, leases []distlock.Lease, ttl time.Duration) []distlock.RefreshResult {
	res := make([]distlock.RefreshResult, len(leases))
	if err := checkTTL(ttl); err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	ls := make([]*lease, len(leases))
	var all []int
	for i, dl := range leases {
		l, ok := dl.(*lease)
		if !ok || l.b != b {
			res[i].Err = fmt.Errorf("redislock: lease %T is not from this backend", dl)
			continue
		}
		ls[i] = l
		all = append(all, i)
	}
	if len(all) == 0 {
		return res
	}
	size := 1
	if _, ok := b.client.(*redis.Client); ok && !b.noBatch.Load() {
		size = refreshBatch
	}
	var groups []*refreshGroup
	for len(all) > 0 {
		n := min(size, len(all))
		groups = append(groups, &refreshGroup{idx: all[:n:n]})
		all = all[n:]
	}
	sent := time.Now()
	b.runRefresh(ctx, ls, groups, ttl)
	if size > 1 {
		// A server in cluster mode refuses keys of different slots in one
		// call even when it holds them all: refresh those one by one, now
		// and from now on.
		var split []*refreshGroup
		for _, g := range groups {
			if len(g.idx) > 1 && redis.HasErrorPrefix(g.cmd.Err(), "CROSSSLOT") {
				b.noBatch.Store(true)
				for _, i := range g.idx {
					split = append(split, &refreshGroup{idx: []int{i}})
				}
				g.idx = nil
			}
		}
		if len(split) > 0 {
			b.runRefresh(ctx, ls, split, ttl)
			groups = append(groups, split...)
		}
	}
	for _, g := range groups {
		if len(g.idx) == 0 { // split above
			continue
		}
		if len(g.idx) == 1 {
			n, err := g.cmd.Int64()
			res[g.idx[0]].Validity, res[g.idx[0]].Err = ls[g.idx[0]].refreshed(ctx, sent, ttl, n, err)
			continue
		}
		vals, err := g.cmd.Int64Slice()
		if err == nil && len(vals) != len(g.idx) {
			err = fmt.Errorf("redislock: refresh: %d results for %d leases", len(vals), len(g.idx))
		}
		for j, i := range g.idx {
			var n int64
			if err == nil {
				n = vals[j]
			}
			res[i].Validity, res[i].Err = ls[i].refreshed(ctx, sent, ttl, n, err)
		}
	}
	return res
}

// refreshGroup is the leases (indexes) refreshed by one script call.
type refreshGroup struct {
	idx []int
	cmd *redis.Cmd
}

// runRefresh sends one script call per group in one pipeline, and sends
// again with EVAL the calls that met a server without the script.
func (b *Backend) runRefresh(ctx context.Context, ls []*lease, groups []*refreshGroup, ttl time.Duration) {
	send := func(eval bool, gs []*refreshGroup) {
		pipe := b.client.Pipeline()
		for _, g := range gs {
			script := refreshScript
			var keys []string
			var args []any
			if len(g.idx) == 1 {
				l := ls[g.idx[0]]
				keys, args = []string{l.k.lock}, []any{l.secret, ceilMillis(ttl)}
			} else {
				script = refreshMany
				keys, args = make([]string, 0, len(g.idx)), make([]any, 0, len(g.idx)+1)
				for _, i := range g.idx {
					keys, args = append(keys, ls[i].k.lock), append(args, ls[i].secret)
				}
				args = append(args, ceilMillis(ttl))
			}
			if eval {
				g.cmd = script.Eval(ctx, pipe, keys, args...)
			} else {
				g.cmd = script.EvalSha(ctx, pipe, keys, args...)
			}
		}
		_, _ = pipe.Exec(ctx)
	}
	send(false, groups)
	var again []*refreshGroup
	for _, g := range groups {
		if isNoScript(g.cmd.Err()) {
			again = append(again, g)
		}
	}
	if len(again) > 0 {
		send(true, again)
	}
}

func checkTTL(ttl time.Duration) error {
	if ttl <= 0 || ttl > distlock.MaxTTL {
		return fmt.Errorf("%w: redislock: TTL %v is not in (0, %v]", distlock.ErrInvalidOption, ttl, distlock.MaxTTL)
	}
	return nil
}

// ceilMillis rounds d up to whole milliseconds, the unit of PX and PEXPIRE:
// the server then keeps a grant at least as long as the holder counts on.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// lease is one grant.
type lease struct {
	b        *Backend
	key      string
	k        lockKeys
	secret   string
	token    uint64
	validity distlock.Validity

	mu       sync.Mutex
	released bool // a release was confirmed
}

func (l *lease) Token() uint64               { return l.token }
func (l *lease) Validity() distlock.Validity { return l.validity }

func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (distlock.Validity, error) {
	if err := checkTTL(ttl); err != nil {
		return distlock.Validity{}, err
	}
	sent := time.Now()
	n, err := refreshScript.Run(ctx, l.b.client, []string{l.k.lock}, l.secret, ceilMillis(ttl)).Int64()
	return l.refreshed(ctx, sent, ttl, n, err)
}

func (l *lease) refreshed(ctx context.Context, sent time.Time, ttl time.Duration, n int64, err error) (distlock.Validity, error) {
	if err != nil {
		return distlock.Validity{}, classify(ctx, "refresh "+strconv.Quote(l.key), err)
	}
	if n != 1 {
		return distlock.Validity{}, fmt.Errorf("%w: redislock: token %d no longer holds %q", distlock.ErrLockLost, l.token, l.key)
	}
	return distlock.Validity{Sent: sent, TTL: ttl}, nil
}

// Release implements distlock.Lease. A release whose reply was lost can be
// retried: the tombstone left by the first attempt makes the retry report
// success, not a loss.
func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return fmt.Errorf("%w: redislock: token %d of %q was already released", distlock.ErrLockLost, l.token, l.key)
	}
	n, err := l.b.runRelease(ctx, l.k, l.secret, "", 0)
	if err != nil {
		return fmt.Errorf("release %q: %w", l.key, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: redislock: token %d no longer holds %q", distlock.ErrLockLost, l.token, l.key)
	}
	l.released = true
	return nil
}
