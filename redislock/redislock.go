package redislock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
	// retried after a lost reply is reported as done rather than lost.
	TombstoneTTL = time.Minute
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
	prefix       string
	fair         bool
	liveness     time.Duration
	waitReplicas int
	waitTimeout  time.Duration
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
		b.sub = newSubscriber(b.client)
	}
	return b.sub, nil
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
// script sets the lock and increments its fencing counter); a waiting
// Acquire subscribes to the key's release channel first, then tries, then
// waits for a release message or for the holder's TTL to run out.
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
	keys := []string{a.k.lock, a.k.token, a.k.queue, a.k.alive}
	joinArg := "0"
	if join {
		joinArg = "1"
	}
	args := []any{a.secret, ceilMillis(a.opts.TTL), a.opts.Owner, a.waiter, ceilMillis(b.cfg.liveness), joinArg}

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

// wait is a blocking Acquire: subscribe, try, wait for a signal, repeat.
func (a *attempt) wait(ctx context.Context) (distlock.Lease, error) {
	b := a.b
	sub, err := b.subscriber()
	if err != nil {
		return nil, err
	}
	w := sub.add(a.k.channel, a.waiter)
	defer sub.remove(w)

	// Subscribe before the first try, so that a release between the try and
	// the subscription cannot be missed.
	ready := time.NewTimer(subscribeWait)
	select {
	case <-w.st.ready:
	case <-ready.C:
	case <-ctx.Done():
	case <-b.done:
	}
	ready.Stop()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if err := a.interrupted(ctx); err != nil {
			return nil, err
		}
		w.tried.Store(true)
		l, retryIn, err := a.try(ctx, true)
		if err != nil || l != nil {
			if err != nil && ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", distlock.ErrNotAcquired, err)
			}
			return l, err
		}
		if b.cfg.fair {
			// Trying again also refreshes our place in the queue.
			retryIn = min(retryIn, b.cfg.liveness/3)
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
	_, _ = a.b.runRelease(cctx, a.k, a.secret, a.waiter)
}

// abandon undoes whatever a failed try may have done at the server: a grant
// whose reply was lost, a place in the queue. It tries at once and, if that
// fails too, keeps trying in the background until the grant would have
// lapsed anyway or the Backend is closed.
func (a *attempt) abandon(ctx context.Context, sent time.Time) {
	b := a.b
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandTimeout)
	_, err := b.runRelease(cctx, a.k, a.secret, a.waiter)
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
			_, err := b.runRelease(cctx, a.k, a.secret, a.waiter)
			cancel()
			if err == nil || !errors.Is(err, distlock.ErrUnavailable) {
				return
			}
		}
	}()
}

// runRelease runs the release script: it releases the grant with secret if
// held, and takes waiter (if not "") out of the queue. It returns 1 when it
// released, 2 when an earlier call had, 0 when the grant was not held.
func (b *Backend) runRelease(ctx context.Context, k lockKeys, secret, waiter string) (int64, error) {
	fair := "0"
	if b.cfg.fair {
		fair = "1"
	}
	n, err := releaseScript.Run(ctx, b.client,
		[]string{k.lock, k.tomb(secret), k.queue, k.alive},
		secret, ceilMillis(TombstoneTTL), k.channel, fair, waiter).Int64()
	return n, classify(ctx, "release", err)
}

// RefreshAll implements distlock.BatchRefresher: it refreshes every lease
// in one pipeline (one round trip on a single server; one per node that
// holds some of the keys on a Cluster).
func (b *Backend) RefreshAll(ctx context.Context, leases []distlock.Lease, ttl time.Duration) []distlock.RefreshResult {
	res := make([]distlock.RefreshResult, len(leases))
	if err := checkTTL(ttl); err != nil {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	ls := make([]*lease, len(leases))
	for i, dl := range leases {
		l, ok := dl.(*lease)
		if !ok || l.b != b {
			res[i].Err = fmt.Errorf("redislock: lease %T is not from this backend", dl)
			continue
		}
		ls[i] = l
	}
	run := func(eval bool, idx []int) []*redis.Cmd {
		pipe := b.client.Pipeline()
		cmds := make([]*redis.Cmd, len(ls))
		for _, i := range idx {
			keys, args := []string{ls[i].k.lock}, []any{ls[i].secret, ceilMillis(ttl)}
			if eval {
				cmds[i] = refreshScript.Eval(ctx, pipe, keys, args...)
			} else {
				cmds[i] = refreshScript.EvalSha(ctx, pipe, keys, args...)
			}
		}
		_, _ = pipe.Exec(ctx)
		return cmds
	}
	var all []int
	for i, l := range ls {
		if l != nil {
			all = append(all, i)
		}
	}
	if len(all) == 0 {
		return res
	}
	sent := time.Now()
	cmds := run(false, all)
	var again []int
	for _, i := range all {
		if isNoScript(cmds[i].Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		for i, c := range run(true, again) {
			if c != nil {
				cmds[i] = c
			}
		}
	}
	for _, i := range all {
		n, err := cmds[i].Int64()
		res[i].Validity, res[i].Err = ls[i].refreshed(ctx, sent, ttl, n, err)
	}
	return res
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
	n, err := l.b.runRelease(ctx, l.k, l.secret, "")
	if err != nil {
		return fmt.Errorf("release %q: %w", l.key, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: redislock: token %d no longer holds %q", distlock.ErrLockLost, l.token, l.key)
	}
	l.released = true
	return nil
}
