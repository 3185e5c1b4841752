package redislock

// Acquire: one try of the acquire script, and what driver.Wait needs to
// wait around it (the subscription to the release channel, the hand-off,
// the holder's expiry).

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redact"
)

// noExpiryPoll is the fallback re-check interval while the lock key has
// no expiry (set by something else than this package).
const noExpiryPoll = time.Second

// Acquire implements driver.Backend. The try is one round trip (one Lua
// script sets the lock and increments its fencing counter). A waiting
// Acquire whose first try finds the key held subscribes to the key's
// release channel, tries again once the subscription is confirmed (see
// driver.Wait), then
// waits for a release message or for the holder's TTL to run out. The first
// Acquire of a Backend also checks the server's eviction policy (see
// WithEvictionAllowed).
func (b *Backend) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
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
	a := b.newAttempt(key, opts)
	if opts.Wait {
		return a.wait(ctx)
	}
	l, r, err := a.try(ctx, false)
	if err != nil {
		if ctx.Err() != nil {
			return nil, driver.Canceled(ctx)
		}
		return nil, err
	}
	if l == nil {
		return nil, fmt.Errorf("%w: redislock: %s", driver.ErrNotAcquired, r.why)
	}
	return l, nil
}

// attempt is one Acquire call.
type attempt struct {
	b    *Backend
	k    lockKeys // with the grant's secret, unguessable
	args scriptArgs
	// waiterID is the waiter's id, given when it first waits (never with
	// WithUnordered), and waiter its place in the queue as the scripts
	// write it: "<id>|<secret>|<TTL ms>|<liveness ms>|<owner>", set with
	// waiterID.
	waiterID string
	waiter   redact.Secret
	opts     driver.AcquireOptions
	// shared is set for AcquireShared: the attempt asks for a shared
	// grant, through the shared_*.lua scripts, and always waits in the
	// queue (WithUnordered does not apply to it).
	shared bool
	// rest is the value's end that the last try sent (see valueRest),
	// passed by pointer (see TestClientCycleAllocs).
	rest string
	// lease is the attempt's grant once it has one (an attempt is granted
	// at most once), in the attempt (see TestClientCycleAllocs).
	lease lease
}

// grant returns the lease of the attempt's grant of token, valid for v.
func (a *attempt) grant(token uint64, v driver.Validity) *lease {
	l := &a.lease
	l.b, l.k, l.args, l.token, l.validity, l.shared = a.b, &a.k, &a.args, token, v, a.shared
	return l
}

func (b *Backend) newAttempt(key string, opts driver.AcquireOptions) *attempt {
	var secret [secretLen]byte
	newSecret(&secret)
	a := &attempt{b: b, k: b.keysFor(key, secret[:]), opts: opts}
	a.args = boxArgs(&a.k)
	return a
}

// unordered tells whether the attempt waits without the queue
// (WithUnordered, for an exclusive grant only).
func (a *attempt) unordered() bool { return a.b.cfg.unordered && !a.shared }

// giveWaiterID gives a an id for the queue, if it has none yet: the
// Backend's id, ':', and a random part.
func (a *attempt) giveWaiterID() {
	if a.waiterID == "" && !a.unordered() {
		a.waiterID = a.b.id + ":" + rand.Text()
		if a.shared {
			// The mark of a shared waiter (see queue.lua): a random
			// part is otherwise upper case.
			a.waiterID = a.b.id + ":s" + rand.Text()
		}
		held, _ := a.k.held.MarshalBinary() // "<secret>|"
		w := make([]byte, 0, len(a.waiterID)+1+len(held)+2*20+1+len(a.opts.Owner))
		w = append(append(w, a.waiterID...), '|')
		w = append(w, held...)
		w = append(strconv.AppendInt(w, ceilMillis(a.opts.TTL), 10), '|')
		w = append(strconv.AppendInt(w, ceilMillis(a.b.cfg.liveness), 10), '|')
		a.waiter = redact.Bytes(append(w, a.opts.Owner...))
	}
}

// queued returns the attempt's place in the queue, as the release scripts
// take it, or nil if it has none.
func (a *attempt) queued() *redact.Secret {
	if a.waiterID == "" {
		return nil
	}
	return &a.waiter
}

// handedLease is the lease of a grant that a release handed the waiter
// (payload "<token>|<ms>", see release.lua), or nil if the payload is
// unusable; queued is when the waiter sent the try that last refreshed its
// place, which the server reckoned ms from, and seen the fencing counter
// that try found. The server set the lock's TTL at the hand-off, at least
// ms after it ran that try, itself sent after queued: the validity runs
// from queued, for the TTL plus ms. That holds only for a hand-off after
// the try, whose token is above seen. A message of an earlier hand-off,
// read late (the pub/sub connection lagged), is of a grant that the try
// would have found, had it still been there: it lapsed, and its ms were
// counted from an older refresh.
func (a *attempt) handedLease(payload string, queued time.Time, seen uint64) *lease {
	t, ms, ok := strings.Cut(payload, "|")
	token, err1 := strconv.ParseUint(t, 10, 64)
	waited, err2 := strconv.ParseInt(ms, 10, 64)
	if !ok || err1 != nil || err2 != nil || token <= seen || queued.IsZero() {
		return nil
	}
	ttl := a.opts.TTL + time.Duration(waited)*time.Millisecond
	if ttl <= 0 {
		return nil
	}
	return a.grant(token, driver.Validity{Sent: queued, TTL: ttl})
}

// refusal is why a try was not granted, and when to try again; sent is
// when the try was sent, and seen the fencing counter it found (a try
// that queued the waiter reports it).
type refusal struct {
	why     string
	retryIn time.Duration
	sent    time.Time
	seen    uint64
}

// try runs the acquire script once; join, for a waiting try, queues a
// waiter that is not granted and marks a held lock as waited for. It returns the lease when granted, and otherwise why not and
// when to try again.
func (a *attempt) try(ctx context.Context, join bool) (*lease, refusal, error) {
	var args []any
	if a.shared {
		args = a.sharedArgs(join)
	} else {
		args = a.acquireArgs(join)
	}
	sent := time.Now()
	res, err := a.send(ctx, args)
	if err != nil {
		// The script may have run although its reply was lost, or granted
		// what too few replicas confirmed: leave no grant (and no place in
		// the queue) behind; unless the script refused the secret before
		// it did anything.
		if !isSecretRefused(err) {
			a.abandon(ctx, sent)
		}
		return nil, refusal{}, err
	}
	status, val, seen, ok := parseAcquireReply(res)
	if !ok {
		a.abandon(ctx, sent)
		return nil, refusal{}, fmt.Errorf("redislock: unexpected acquire reply %v", res)
	}
	switch status {
	case acquireGranted:
		return a.grant(uint64(val), driver.Validity{Sent: sent, TTL: a.opts.TTL}), refusal{}, nil
	case acquireHeld:
		if val < 0 {
			return nil, refusal{"held", noExpiryPoll, sent, seen}, nil
		}
		return nil, refusal{"held", time.Duration(val+1) * time.Millisecond, sent, seen}, nil
	case acquireNotFirst:
		return nil, refusal{"free, but others queue for it", time.Duration(max(val, 1)) * time.Millisecond, sent, seen}, nil
	default: // acquireTooLate
		// Only a clean-up of this attempt (abandon) writes its tombstone,
		// and a release of its grant its last-release record, and either
		// ends the attempt, so this reply can come only from a request
		// sent again after that. The script
		// did nothing: there is nothing to undo, and a new attempt, with a
		// new secret, is not concerned.
		return nil, refusal{}, errTooLate
	}
}

// errTooLate is the acquire script's TOO_LATE read by the attempt itself.
var errTooLate = fmt.Errorf("%w: redislock: the server had already released or cleaned up this acquire's grant", driver.ErrUnavailable)

// acquireArgs are the arguments of acquire.lua for one try, as runScript
// takes them.
func (a *attempt) acquireArgs(join bool) []any {
	b := a.b
	flags := b.acquireFlags[0]
	if join {
		flags = b.acquireFlags[1]
	}
	a.rest = valueRest(time.Now(), a.opts.Owner)
	args := []any{nil, nil, 9, a.args.lock, a.args.token, a.args.queue, a.args.alive, a.args.tomb, a.args.last, a.args.watched,
		a.args.readers, a.args.grants, a.args.held, b.millisArg(a.opts.TTL), &a.rest, flags, nil, nil}
	if a.waiterID == "" {
		return args[:len(args)-2]
	}
	args[len(args)-2], args[len(args)-1] = &a.waiter, b.livenessArg
	return args
}

// valueRest is the lock key's value after the token for a grant made at
// now (the since field, informational) to owner, not yet waited for, as
// acquire.lua takes it: "|<since ms>|0|<owner>".
func valueRest(now time.Time, owner string) string {
	var ms [20]byte
	var sb strings.Builder
	sb.Grow(len(ms) + len("||0|") + len(owner))
	sb.WriteByte('|')
	sb.Write(strconv.AppendInt(ms[:0], now.UnixMilli(), 10))
	sb.WriteString("|0|")
	sb.WriteString(owner)
	return sb.String()
}

// parseAcquireReply checks acquire.lua's reply: a token, or {status,
// value[, seen]}.
func parseAcquireReply(reply any) (status, val int64, seen uint64, ok bool) {
	if token, isInt := reply.(int64); isInt {
		return acquireGranted, token, 0, token > 0 // tokens start at 1
	}
	res, _ := reply.([]any)
	if len(res) != 2 && len(res) != 3 {
		return 0, 0, 0, false
	}
	s, ok1 := res[0].(int64)
	v, ok2 := res[1].(int64)
	if len(res) == 3 {
		n, ok3 := res[2].(int64)
		if !ok3 || n < 0 || (s != acquireHeld && s != acquireNotFirst) {
			return 0, 0, 0, false
		}
		seen = uint64(n)
	}
	switch {
	case !ok1 || !ok2:
		return 0, 0, 0, false
	case s == acquireHeld, s == acquireNotFirst, s == acquireTooLate:
		ok = true
	}
	return s, v, seen, ok
}

// send runs the acquire script (shared_acquire.lua for a shared
// attempt), and with WithWaitReplicas the WAIT that confirms a grant.
func (a *attempt) send(ctx context.Context, args []any) (any, error) {
	b := a.b
	script := acquireScript
	if a.shared {
		script = sharedAcquire
	}
	if b.cfg.waitReplicas == 0 {
		res, err := runScript(ctx, b.client, script(), args).Result()
		return res, classify(ctx, "", err)
	}
	// The script and WAIT go over one connection to the key's primary:
	// WAIT counts the replicas that have this connection's writes.
	var node *redis.Client
	switch c := b.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, a.k.lock); err != nil {
			return nil, classify(ctx, "", err)
		}
	}
	conn := node.Conn()
	defer conn.Close()
	res, err := runScript(ctx, conn, script(), args).Result()
	if err != nil {
		return nil, classify(ctx, "", err)
	}
	if _, granted := res.(int64); !granted {
		return res, nil
	}
	n, err := conn.Wait(ctx, b.cfg.waitReplicas, b.cfg.waitTimeout).Result()
	if err != nil {
		return nil, classify(ctx, "WAIT", err)
	}
	if n < int64(b.cfg.waitReplicas) {
		return nil, fmt.Errorf("%w: redislock: %d of %d replicas acknowledged the grant within %v; released it",
			driver.ErrUnavailable, n, b.cfg.waitReplicas, b.cfg.waitTimeout)
	}
	return res, nil
}

// wait is a blocking Acquire, run by driver.Wait: try; when held,
// subscribe and try again once subscribed; then wait for a wake-up or the
// holder's expiry, and try again. An uncontended waiting Acquire thus
// costs no more requests than a single try.
//
// With the queue the subscription is to the Backend's wake channel, and a
// waiter joins the queue only once subscribed: a release skips a queued
// waiter that nobody hears on its channel. With WithUnordered it is to the
// key's release channel.
//
// When the channel is already subscribed (other waiters, or a
// subscription lingering after the last one), the waiter registers first,
// which costs no request, and its first try is then covered.
func (a *attempt) wait(ctx context.Context) (driver.Lease, error) {
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
	ch := b.wakeChannel
	if a.unordered() {
		ch = a.k.channel
	}
	// The waiter's id (random, and sent with every try) is made only when
	// it may queue: an uncontended Acquire goes without.
	if sub = b.currentSubscriber(); sub != nil {
		a.giveWaiterID()
		w = sub.addIfSubscribed(ch, a.waiterID)
	}
	var (
		// When the try that last refreshed our place was sent, and the
		// fencing counter it found.
		queued time.Time
		seen   uint64
		// failed is set when a try failed: it cleaned up after itself.
		failed bool
		// recheck is set by a new subscription; last is the pause the
		// try before it asked for (see hooks.noRecheck).
		recheck bool
		last    time.Duration
	)
	l, err := driver.Wait(ctx, driver.Waiter[*lease]{
		Try: func(ctx context.Context, _ bool) (*lease, *driver.Held, error) {
			if w != nil {
				if g := w.handed.Swap(nil); g != nil && b.cfg.waitReplicas == 0 {
					// A release granted us the lock. (With WithWaitReplicas,
					// this try finds the grant and confirms it with WAIT:
					// the release that handed it over waited for no
					// replica.)
					if l := a.handedLease(*g, queued, seen); l != nil {
						return l, nil, nil
					}
				}
				if recheck && b.hooks.noRecheck {
					recheck = false
					if h := b.hooks.beforeSleep; h != nil {
						h()
					}
					return nil, &driver.Held{Wake: w.wake, RetryIn: last}, nil
				}
				recheck = false
				w.tried.Store(true)
			}
			join := w != nil || a.unordered()
			l, r, err := a.try(ctx, join)
			switch {
			case err != nil:
				failed = true
				return nil, nil, err
			case l != nil:
				return l, nil, nil
			}
			if join && a.waiterID != "" {
				queued, seen = r.sent, r.seen
			}
			last = r.retryIn
			if !a.unordered() {
				// Trying again also refreshes our place in the queue.
				last = min(last, b.cfg.liveness/3)
			}
			if w == nil {
				if h := b.hooks.afterFirstHeld; h != nil {
					h()
				}
				return nil, &driver.Held{}, nil
			}
			if h := b.hooks.beforeSleep; h != nil {
				h()
			}
			return nil, &driver.Held{Wake: w.wake, RetryIn: last}, nil
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
			w, subErr = sub.add(ch, a.waiterID)
			recheck = true
			if subErr != nil {
				// No SUBSCRIBE could be sent (the client is closed, the
				// server unreachable): no confirmation is coming.
				return nil, nil
			}
			return w.st.ready, nil
		},
		Leave: func() {
			if a.waiterID != "" && !failed {
				a.leaveQueue(ctx)
			}
		},
		Closing: b.closing.Done(),
		Closed:  closed,
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

func closed() error { return ErrClosed }
