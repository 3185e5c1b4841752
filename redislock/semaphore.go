package redislock

// Permits of counting semaphores (driver.Semaphores): a sorted set of live
// permits scored by their expiry in the server's time, a line of waiters
// ranked on arrival, and the stored limit, all changed by Lua scripts
// (scripts/permit_*.lua) that first drop what lapsed. Waiting reuses the
// locks' machinery: driver.Wait, the Backend's wake channel and its
// subscriber, the line swept by queue.lua.

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redact"
)

var (
	_ driver.Semaphores = (*Backend)(nil)
	_ driver.Lease      = (*permit)(nil)
	_ driver.SlotLease  = (*permit)(nil)
)

// Suffixes of the Redis keys of a semaphore, after its key's hash tag; see
// the key layout in the package documentation. The fencing counter is the
// key's lock counter (suffixToken).
const (
	suffixPermits     = ":permits"
	suffixPermitGrant = ":permit-grants"
	suffixLimit       = ":limit"
	suffixLine        = ":line"
	suffixLineAlive   = ":line-alive"
	suffixPermitsDone = ":permits-done"
)

// permitKeys are the Redis keys of the semaphore at one key, in the order
// the permit scripts declare them (see scripts/permits.lua).
func (b *Backend) permitKeys(key string) []any {
	base := b.cfg.prefix + HashTag(key)
	return []any{base + suffixPermits, base + suffixPermitGrant, base + suffixLimit,
		base + suffixLine, base + suffixLineAlive, base + suffixPermitsDone, base + suffixToken}
}

// permitFlags returns "c" where PUBLISH counts every subscriber (a single
// server), so that the scripts can drop a waiter nobody hears, as the
// lock scripts do.
func (b *Backend) permitFlags() string {
	if _, ok := b.client.(*redis.Client); ok {
		return "c"
	}
	return ""
}

// AcquirePermit implements driver.Semaphores. A try is one script, which
// grants a permit when fewer than the limit are live and nobody waits
// before the asker, drawing its token from the key's lock counter. A
// waiting AcquirePermit waits as a lock's Acquire does (see Waiting in the
// package documentation): it tries, subscribes to its Backend's wake
// channel when every permit is held, then joins the semaphore's line and
// waits for a wake-up, or for the first permit's expiry (at most a third
// of the waiter liveness, as each try refreshes its place in line).
// WithUnordered does not apply: permits are always served in line.
func (b *Backend) AcquirePermit(ctx context.Context, key string, sem driver.Semaphore, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckPermit(ctx, key, sem, opts); err != nil {
		return nil, err
	}
	if b.isClosed() {
		return nil, ErrClosed
	}
	if err := b.checkEviction(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, driver.Canceled(ctx)
		}
		return nil, err
	}
	secret := new([secretLen]byte)
	newSecret(secret)
	a := &permitAttempt{b: b, key: key, keys: b.permitKeys(key), secret: redact.Bytes(secret[:]), sem: sem, opts: opts}
	if opts.Wait {
		return a.wait(ctx)
	}
	p, _, err := a.try(ctx, false)
	switch {
	case err != nil:
		if ctx.Err() != nil {
			return nil, driver.Canceled(ctx)
		}
		return nil, err
	case p == nil:
		return nil, fmt.Errorf("%w: redislock: all %d permits held, or awaited", driver.ErrNotAcquired, sem.Limit)
	}
	return p, nil
}

// permitAttempt is one AcquirePermit call.
type permitAttempt struct {
	b      *Backend
	key    string
	keys   []any         // permitKeys
	secret redact.Secret // unguessable; see scriptArgs
	sem    driver.Semaphore
	opts   driver.AcquireOptions
	// waiterID is the attempt's id in the line, "<Backend id>:<random>",
	// given when it first waits; joined is set once a try may have put it
	// there, abandoned once a failed try's clean-up took it out.
	waiterID  string
	joined    bool
	abandoned bool
}

// try runs permit_acquire.lua once; join, for a waiting try, puts the
// attempt in line when it is not granted, or refreshes its place there.
// It returns the permit when granted, or else how long to wait at most
// before trying again (0: no permit expires, only a wake-up will come).
func (a *permitAttempt) try(ctx context.Context, join bool) (*permit, time.Duration, error) {
	b := a.b
	flags := b.permitFlags()
	if a.sem.Slots {
		flags += "s"
	}
	args := append([]any{nil, nil, len(a.keys)}, a.keys...)
	args = append(args, &a.secret, ceilMillis(a.opts.TTL), a.sem.Limit)
	if join {
		flags += "j"
		a.joined = true
	}
	args = append(args, flags, time.Now().UnixMilli(), a.opts.Owner)
	if join {
		args = append(args, a.waiterID, ceilMillis(b.cfg.liveness))
	}
	sent := time.Now()
	res, err := a.send(ctx, args)
	if err != nil {
		// The script may have run although its reply was lost: leave no
		// permit, and no place in line, behind; unless the script refused
		// the secret before it did anything.
		if !isSecretRefused(err) {
			a.abandon(ctx, sent)
		}
		return nil, 0, err
	}
	reply, _ := res.([]any)
	var v [3]int64
	ok := len(reply) >= 2 && len(reply) <= 3
	for i := 0; ok && i < len(reply); i++ {
		v[i], ok = reply[i].(int64)
	}
	switch {
	case !ok:
	case v[0] == permitGranted && len(reply) == 3 && v[1] > 0:
		return &permit{a: a, token: uint64(v[1]), slot: int(v[2]),
			validity: driver.Validity{Sent: sent, TTL: a.opts.TTL}}, 0, nil
	case v[0] == permitFull && len(reply) == 2:
		return nil, time.Duration(v[1]) * time.Millisecond, nil
	case v[0] == permitBadLimit && len(reply) == 2:
		return nil, 0, &driver.LimitError{Stored: int(v[1]), Asked: a.sem.Limit}
	case v[0] == permitTooLate && len(reply) == 2:
		return nil, 0, errTooLate
	}
	a.abandon(ctx, sent)
	return nil, 0, fmt.Errorf("redislock: unexpected permit reply %v", res)
}

// send runs permit_acquire.lua, and with WithWaitReplicas the WAIT that
// confirms a grant, as attempt.send does for a lock.
func (a *permitAttempt) send(ctx context.Context, args []any) (any, error) {
	b := a.b
	if b.cfg.waitReplicas == 0 {
		res, err := runScript(ctx, b.client, permitAcquire(), args).Result()
		return res, classify(ctx, "", err)
	}
	var node *redis.Client
	switch c := b.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, a.keys[0].(string)); err != nil {
			return nil, classify(ctx, "", err)
		}
	}
	conn := node.Conn()
	defer conn.Close()
	res, err := runScript(ctx, conn, permitAcquire(), args).Result()
	if err != nil {
		return nil, classify(ctx, "", err)
	}
	if r, _ := res.([]any); len(r) != 3 || r[0] != int64(permitGranted) {
		return res, nil
	}
	n, err := conn.Wait(ctx, b.cfg.waitReplicas, b.cfg.waitTimeout).Result()
	if err != nil {
		return nil, classify(ctx, "WAIT", err)
	}
	if n < int64(b.cfg.waitReplicas) {
		return nil, fmt.Errorf("%w: redislock: %d of %d replicas acknowledged the permit within %v; released it",
			driver.ErrUnavailable, n, b.cfg.waitReplicas, b.cfg.waitTimeout)
	}
	return res, nil
}

// wait is a blocking AcquirePermit, run by driver.Wait as attempt.wait runs
// a lock's: try; when every permit is held, subscribe to the Backend's
// wake channel and try again once subscribed, joining the line; then wait
// for a wake-up (a permit given back while this waiter is among the first
// that a free permit awaits) or the fallback timer, and try again. When
// the wake channel is already subscribed, the waiter registers first, at
// no cost, and its first try joins the line.
func (a *permitAttempt) wait(ctx context.Context) (driver.Lease, error) {
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
		a.giveWaiterID()
		w = sub.addIfSubscribed(b.wakeChannel, a.waiterID)
	}
	p, err := driver.Wait(ctx, driver.Waiter[*permit]{
		Try: func(ctx context.Context, _ bool) (*permit, *driver.Held, error) {
			if w != nil {
				w.tried.Store(true)
			}
			p, retryIn, err := a.try(ctx, w != nil)
			switch {
			case err != nil:
				return nil, nil, err
			case p != nil:
				return p, nil, nil
			case w == nil:
				return nil, &driver.Held{}, nil
			}
			// Trying again also refreshes our place in line.
			next := b.cfg.liveness / 3
			if retryIn > 0 {
				next = min(next, retryIn)
			}
			return nil, &driver.Held{Wake: w.wake, RetryIn: next}, nil
		},
		Subscribe: func(context.Context) (<-chan struct{}, error) {
			if sub == nil {
				var err error
				if sub, err = b.subscriber(); err != nil {
					return nil, err
				}
			}
			a.giveWaiterID()
			var subErr error
			w, subErr = sub.add(b.wakeChannel, a.waiterID)
			if subErr != nil {
				return nil, nil // no confirmation is coming
			}
			return w.st.ready, nil
		},
		Leave: func() {
			if a.joined && !a.abandoned {
				a.leaveLine(ctx)
			}
		},
		Closing: b.closing.Done(),
		Closed:  closed,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// giveWaiterID gives a an id for the line, if it has none yet.
func (a *permitAttempt) giveWaiterID() {
	if a.waiterID == "" {
		a.waiterID = a.b.id + ":" + rand.Text()
	}
}

// runRelease runs permit_release.lua for the attempt's permit: it gives
// the permit back if it is live, and with leave takes the attempt out of
// the line; with abandon > 0 it records the secret as done with for that
// long in any case.
func (a *permitAttempt) runRelease(ctx context.Context, leave bool, abandon time.Duration) (int64, error) {
	flags := a.b.permitFlags()
	keep := int64(0)
	if abandon > 0 {
		flags += "f"
		keep = ceilMillis(abandon)
	}
	id := ""
	if leave {
		id = a.waiterID
	}
	args := append([]any{nil, nil, len(a.keys)}, a.keys...)
	args = append(args, &a.secret, flags, id, keep)
	n, err := runScript(ctx, a.b.client, permitRelease(), args).Int64()
	return n, classify(ctx, "", err)
}

// leaveLine takes a waiter out of the line (waking the waiters that a free
// permit awaits, should it have been one of them). If that fails, it goes
// on in the background, as a lock's leaveQueue does.
func (a *permitAttempt) leaveLine(ctx context.Context) {
	leave := func(ctx context.Context) error {
		_, err := a.runRelease(ctx, true, 0)
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandTimeout)
	err := leave(cctx)
	cancel()
	if err != nil {
		a.retryInBackground(time.Now(), leave)
	}
}

// abandon undoes whatever a failed try may have done at the server (a
// permit whose reply was lost, a place in line) and records the secret as
// done with, so that a try still on its way does nothing when it arrives;
// as a lock's abandon, it goes on in the background if it fails.
func (a *permitAttempt) abandon(ctx context.Context, sent time.Time) {
	a.abandoned = true
	keep := max(a.opts.TTL, a.b.cfg.liveness, tombstoneTTL)
	cleanUp := func(ctx context.Context) error {
		_, err := a.runRelease(ctx, a.waiterID != "", keep)
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandTimeout)
	err := cleanUp(cctx)
	cancel()
	if err != nil {
		a.retryInBackground(sent, cleanUp)
	}
}

// retryInBackground is attempt.retryInBackground for a permit's clean-up.
func (a *permitAttempt) retryInBackground(sent time.Time, cleanUp func(context.Context) error) {
	(&attempt{b: a.b, opts: a.opts}).retryInBackground(sent, cleanUp)
}

// permit is the lease of one permit. Its errors do not name the key: the
// Client's distlock.KeyError does.
type permit struct {
	a        *permitAttempt
	token    uint64
	slot     int // -1: none asked
	validity driver.Validity

	mu       sync.Mutex
	released bool // a release was confirmed
}

// Token implements driver.Lease.
func (p *permit) Token() uint64 { return p.token }

// Validity implements driver.Lease.
func (p *permit) Validity() driver.Validity { return p.validity }

// Slot implements driver.SlotLease: -1 for a permit asked without Slots.
func (p *permit) Slot() int { return p.slot }

// Refresh implements driver.Lease: permit_refresh.lua extends the permit
// only while it is live, so that a holder whose permit lapsed cannot take
// it back.
func (p *permit) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	sent := time.Now()
	n, err := runScript(ctx, p.a.b.client, permitRefresh(), p.refreshArgs(ttl)).Int64()
	return p.refreshed(ctx, sent, ttl, n, err)
}

// refreshArgs are the arguments of permit_refresh.lua, as runScript takes
// them.
func (p *permit) refreshArgs(ttl time.Duration) []any {
	args := append([]any{nil, nil, len(p.a.keys)}, p.a.keys...)
	return append(args, &p.a.secret, ceilMillis(ttl))
}

// refreshed turns permit_refresh.lua's reply n (or the error of its call)
// into a Refresh result.
func (p *permit) refreshed(ctx context.Context, sent time.Time, ttl time.Duration, n int64, err error) (driver.Validity, error) {
	if err != nil {
		return driver.Validity{}, classify(ctx, "", err)
	}
	switch n {
	case refreshExtended:
		return driver.Validity{Sent: sent, TTL: ttl}, nil
	case refreshGone:
		return driver.Validity{}, p.gone()
	}
	return driver.Validity{}, fmt.Errorf("redislock: unexpected permit refresh reply %d", n)
}

// Release implements driver.Lease. A release whose reply was lost can be
// retried: the first one recorded the secret as released, until the
// permit's TTL would have run out, so that the retry reports success.
func (p *permit) Release(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.released {
		return fmt.Errorf("%w: redislock: the permit of token %d was already released", driver.ErrLockLost, p.token)
	}
	n, err := p.a.runRelease(ctx, false, 0)
	if err != nil {
		return err
	}
	switch n {
	case releaseReleased, releaseAlreadyReleased:
		p.released = true
		return nil
	case releaseNotHeld:
		return p.gone()
	}
	return fmt.Errorf("redislock: unexpected permit release reply %d", n)
}

func (p *permit) gone() error {
	return fmt.Errorf("%w: redislock: the permit of token %d is gone (it expired)", driver.ErrLockLost, p.token)
}

// permitRefreshes are the permits that one RefreshAll refreshes, one
// script call each, in the pipeline of its locks (see runRefresh).
type permitRefreshes struct {
	ps   []*permit
	idx  []int // ps[j] is RefreshAll's leases[idx[j]]
	cmds []*redis.Cmd
	// again are the calls (indexes in ps) to send again with EVAL.
	again []int
}

// queue adds to pipe the calls of the permits that have none yet, or
// with eval those that met a server without the script (again).
func (r *permitRefreshes) queue(ctx context.Context, pipe redis.Pipeliner, ttl time.Duration, eval bool) {
	if r == nil {
		return
	}
	which := r.again
	if !eval {
		r.cmds = make([]*redis.Cmd, len(r.ps))
		which = make([]int, len(r.ps))
		for j := range which {
			which[j] = j
		}
	}
	for _, j := range which {
		args := r.ps[j].refreshArgs(ttl)
		if eval {
			args[0], args[1] = "eval", permitRefresh().src
		} else {
			args[0], args[1] = "evalsha", permitRefresh().hash
		}
		r.cmds[j] = redis.NewCmd(ctx, args...)
		_ = pipe.Process(ctx, r.cmds[j])
	}
}

// noScript gathers the calls that met a server without the script, and
// reports whether there are any.
func (r *permitRefreshes) noScript() bool {
	if r == nil {
		return false
	}
	r.again = r.again[:0]
	for j, c := range r.cmds {
		if isNoScript(c.Err()) {
			r.again = append(r.again, j)
		}
	}
	return len(r.again) > 0
}

// results puts each permit's result into RefreshAll's res.
func (r *permitRefreshes) results(ctx context.Context, sent time.Time, ttl time.Duration, res []driver.RefreshResult) {
	for j, c := range r.cmds {
		n, err := c.Int64()
		res[r.idx[j]].Validity, res[r.idx[j]].Err = r.ps[j].refreshed(ctx, sent, ttl, n, err)
	}
}

// Permits implements driver.Semaphores: one script drops what lapsed and
// reads the stored limit, how many wait and the live permits. A Holder's
// Since is the acquiring host's clock at the grant, and Expires this
// host's clock plus the time the server had left on the permit.
func (b *Backend) Permits(ctx context.Context, key string) (driver.PermitState, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.PermitState{}, err
	}
	args := append([]any{nil, nil, 7}, b.permitKeys(key)...)
	args = append(args, b.permitFlags())
	res, err := runScript(ctx, b.client, permitState(), args).Slice()
	now := time.Now()
	if err != nil {
		return driver.PermitState{}, classify(ctx, "permits", err)
	}
	bad := fmt.Errorf("redislock: permits: unexpected reply %v", res)
	if len(res) < 2 || len(res)%2 != 0 {
		return driver.PermitState{}, bad
	}
	limit, ok1 := res[0].(int64)
	waiting, ok2 := res[1].(int64)
	if !ok1 || !ok2 {
		return driver.PermitState{}, bad
	}
	st := driver.PermitState{Limit: int(limit), Waiting: int(waiting)}
	for i := 2; i < len(res); i += 2 {
		g, ok1 := res[i].(string)
		left, ok2 := res[i+1].(int64)
		h, err := parsePermitGrant(g)
		if !ok1 || !ok2 || err != nil {
			return driver.PermitState{}, bad
		}
		h.Key, h.Expires = key, now.Add(time.Duration(left)*time.Millisecond)
		st.Holders = append(st.Holders, h)
	}
	slices.SortFunc(st.Holders, func(x, y driver.Holder) int {
		switch {
		case x.Token < y.Token:
			return -1
		case x.Token > y.Token:
			return 1
		}
		return 0
	})
	return st, nil
}

// parsePermitGrant decodes a permit's grant
// "<token>|<slot>|<since ms>|<owner>".
func parsePermitGrant(g string) (driver.Holder, error) {
	parts := strings.SplitN(g, "|", 4)
	if len(parts) != 4 {
		return driver.Holder{}, fmt.Errorf("malformed permit")
	}
	token, err1 := strconv.ParseUint(parts[0], 10, 64)
	slot, err2 := strconv.Atoi(parts[1])
	since, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return driver.Holder{}, fmt.Errorf("malformed permit")
	}
	h := driver.Holder{Token: token, Owner: parts[3], Since: time.UnixMilli(since)}
	if slot >= 0 {
		h.Slot, h.HasSlot = slot, true
	}
	return h, nil
}
