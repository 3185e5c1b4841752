package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Backend        = (*Backend)(nil)
	_ driver.BatchRefresher = (*Backend)(nil)
	_ driver.Lister         = (*Backend)(nil)
)

// DefaultRequestTimeout bounds each request the Backend makes of etcd on
// its own behalf when WithRequestTimeout is not given.
const DefaultRequestTimeout = 5 * time.Second

// maxPrefixLen bounds the prefix so that lock keys stay far below etcd's
// request size limit.
const maxPrefixLen = 1024

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix         string
	requestTimeout time.Duration
}

// WithPrefix sets the prefix of every lock name (see Backend.KeyPath). Backends
// and `etcdctl lock` users contend for the same locks when they use the
// same prefix. Default: DefaultPrefix ("distlock/"). It must be non-empty
// valid UTF-8 of at most 1024 bytes.
func WithPrefix(prefix string) Option { return func(c *config) { c.prefix = prefix } }

// WithRequestTimeout bounds each request the Backend makes of etcd on its
// own: creating a session, confirming its lease, a single try, a release,
// a clean-up. An unreachable etcd then fails with distlock.ErrUnavailable
// after this long, not at the caller's deadline. Waiting for a held lock is
// bounded by the caller's context only. Default: DefaultRequestTimeout (5s).
// It must be positive.
func WithRequestTimeout(d time.Duration) Option { return func(c *config) { c.requestTimeout = d } }

// Backend is a driver.Backend over etcd, built on the Session and the
// Mutex recipe of go.etcd.io/etcd/client/v3/concurrency. See the package
// documentation for its safety model, key layout and way of waiting. It is
// safe for concurrent use.
//
// A Backend keeps one session (one etcd lease and its keep-alive) per
// distinct TTL, in whole seconds, and owner that it is asked for, shared by
// every lock with that TTL and owner: a lock costs no lease of its own.
type Backend struct {
	cli     *clientv3.Client
	view    *clientv3.Client // cli's services, with a context that ends at Close
	ownsCli bool
	cfg     config
	sorter  driver.Sorter

	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	// queue holds the acquires of each lock name: at most one acquire of
	// this Backend is in etcd for a name at a time (Mutex keys are per
	// session, so two would share a key). A name's turn is kept by an
	// acquire, then by the lease it grants (the turn's holder, for Fence),
	// or by the deletion of a key of ours that may linger (see dropKey).
	queue driver.Queue[*lease]

	// readerSeq numbers the keys of readers (AcquireShared), so that the
	// readers of one session have keys of their own.
	readerSeq atomic.Uint64

	// writers counts, per lock name, the exclusive acquires (Acquire) of
	// this Backend under way: asked and not yet returned. A reader
	// queues for the name's turn only behind them (see sharedTurn).
	wmu     sync.Mutex
	writers map[string]int // guarded by wmu; no entry for 0

	// life says whether the Backend is open and tracks the goroutines it
	// starts; Close shuts it holding mu, so that under mu it stays as read.
	life *driver.Tracker

	mu       sync.Mutex
	sessions map[sessionKey]*session     // the live session of each TTL and owner
	pending  map[sessionKey]*sessionCall // sessions being created
	permits  map[*permit]struct{}        // live permits, each on a lease of its own
}

// turn is a lock name's turn in the Backend's queue.
type turn = driver.Turn[*lease]

// New returns a Backend over cli. The Backend does not own cli: Close
// leaves it open, and it must stay open until the Backend is closed.
// A bad option returns an error matching distlock.ErrInvalidOption.
func New(cli *clientv3.Client, opts ...Option) (*Backend, error) {
	if cli == nil {
		return nil, fmt.Errorf("%w: etcdlock: nil etcd client", driver.ErrInvalidOption)
	}
	cfg := config{prefix: DefaultPrefix, requestTimeout: DefaultRequestTimeout}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.prefix == "" || len(cfg.prefix) > maxPrefixLen || !utf8.ValidString(cfg.prefix):
		return nil, fmt.Errorf("%w: etcdlock: prefix must be 1 to %d bytes of UTF-8", driver.ErrInvalidOption, maxPrefixLen)
	case cfg.requestTimeout <= 0:
		return nil, fmt.Errorf("%w: etcdlock: request timeout %v is not positive", driver.ErrInvalidOption, cfg.requestTimeout)
	}
	b := &Backend{
		cli:      cli,
		cfg:      cfg,
		sorter:   driver.Sorter{Pkg: "etcdlock", Permanent: permanent, RequestTimeout: cfg.requestTimeout},
		life:     driver.NewTracker(ErrClosed),
		sessions: map[sessionKey]*session{},
		pending:  map[sessionKey]*sessionCall{},
		permits:  map[*permit]struct{}{},
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	// Session and Mutex use their client's context for clean-ups that must
	// outlive the caller's (revoking, deleting a waiting key). Give them
	// one that ends when the Backend closes rather than with cli, so that
	// Close never waits on a clean-up that cannot finish.
	b.view = clientv3.NewCtxClient(b.ctx, clientv3.WithZapLogger(cli.GetLogger()))
	b.view.KV, b.view.Lease, b.view.Watcher = cli.KV, cli.Lease, cli.Watcher
	return b, nil
}

// Client returns the etcd client the Backend uses, for transactions fenced
// with a Fence.
func (b *Backend) Client() *clientv3.Client { return b.cli }

// Close revokes the Backend's sessions, which frees every lock it holds,
// and the leases of its permits (their holders are told through OnLost),
// and ends every acquire in progress with ErrClosed; it waits for the
// acquires of permits to revoke their own leases (each within the request
// timeout), which deletes their places in line. It closes the etcd client
// only if OpenURL created it. Close returns the errors of revokes
// that failed (the leases then expire after their TTL). Calling Close
// again does nothing.
func (b *Backend) Close() error {
	b.mu.Lock()
	if !b.life.Shut() {
		b.mu.Unlock()
		return nil
	}
	sessions := make([]*session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	clear(b.sessions)
	permits := make([]*permit, 0, len(b.permits))
	for p := range b.permits {
		permits = append(permits, p)
	}
	b.mu.Unlock()

	errs := make([]error, len(sessions))
	permitErrs := make([]error, len(permits))
	var wg sync.WaitGroup
	for i, p := range permits {
		wg.Go(func() { permitErrs[i] = p.closeRevoke() })
	}
	for i, s := range sessions {
		wg.Go(func() {
			s.cs.Orphan() // stops the keep-alive; the session's watcher reports the loss
			ctx, cancel := context.WithTimeout(context.Background(), b.cfg.requestTimeout)
			defer cancel()
			if _, err := b.cli.Revoke(ctx, s.id); err != nil {
				errs[i] = fmt.Errorf("etcdlock: revoke lease %x: %w", int64(s.id), err)
			}
		})
	}
	wg.Wait()
	errs = append(errs, permitErrs...)
	b.cancel()
	b.life.Wait()
	if b.ownsCli {
		if err := b.cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ttlSeconds converts a lease duration, checked with driver.CheckTTL, to
// etcd's whole seconds, rounding up.
func ttlSeconds(ttl time.Duration) int64 { return int64((ttl + time.Second - 1) / time.Second) }

// Acquire implements driver.Backend.
//
// The lease TTL is opts.TTL rounded up to whole seconds, or etcd's minimum
// if that is larger (the confirmed TTL is in the lease's Validity). Locks
// with the same TTL and opts.Owner share a session.
//
// Same-key acquires through one Backend queue in this process, first come
// first served, and only the first of them is in etcd; across processes
// etcd's own order applies (the earliest created key holds): a reader's
// key (AcquireShared) created before ours is waited for as any other. A try
// (opts.Wait false) fails with distlock.ErrNotAcquired when the key is held
// elsewhere or is being acquired, held or cleaned up through this Backend.
//
// An election's candidacy (opts.Election) is kept in the layout of
// concurrency.Election at key's lock name, with opts.Owner as its key's
// value, and shares the session of its TTL with no owner (see Elections in
// the package documentation).
//
// A waiter whose session ends while it waits gets an error matching
// distlock.ErrUnavailable and ErrSessionLost, never the lock. An acquire
// that fails or is cancelled deletes the key it may have created in etcd;
// if etcd does not answer within the request timeout, it returns and a
// goroutine goes on deleting the key (see the package documentation).
func (b *Backend) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	name := b.KeyPath(key)
	b.addWriter(name, 1)
	defer b.addWriter(name, -1)
	t, err := b.takeTurn(ctx, name, opts.Wait)
	if err != nil {
		return nil, err
	}
	l, err := b.acquireTurn(ctx, t, key, name, ttlSeconds(opts.TTL), opts)
	if err != nil {
		return nil, err // acquireTurn passed the turn on
	}
	return l, nil
}

// takeTurn waits for name's turn in this process, or, for a try, takes it
// if it is free.
func (b *Backend) takeTurn(ctx context.Context, name string, wait bool) (*turn, error) {
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	if !wait {
		t, ok := b.queue.Try(name)
		if !ok {
			return nil, fmt.Errorf("%w: etcdlock: held, being acquired or being cleaned up through this backend", driver.ErrNotAcquired)
		}
		return t, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, driver.Canceled(ctx)
	}
	if t, ok := b.queue.Try(name); ok {
		return t, nil // nobody has it or waits for it here
	}
	// Close ends the wait too.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()
	t, err := b.queue.Wait(wctx, name)
	switch {
	case err == nil:
		return t, nil
	case ctx.Err() != nil:
		return nil, driver.Canceled(ctx)
	}
	return nil, ErrClosed
}

// endTurn ends l's hold on its name's turn, once.
func (b *Backend) endTurn(l *lease) {
	if t := l.turn.Swap(nil); t != nil {
		t.Done()
	}
}

// takeOverTurn moves l's hold on its name's turn to a clean-up of its key,
// once: it returns nil if l's turn had already ended.
func (b *Backend) takeOverTurn(l *lease) *turn {
	t := l.turn.Swap(nil)
	if t != nil {
		t.Set(nil) // the lease no longer holds the name for Fence
	}
	return t
}

// acquireTurn makes one acquire of name in etcd, holding the turn. On
// success the turn belongs to the returned lease; on failure it has been
// passed on (or will be, by the goroutine still cleaning up).
func (b *Backend) acquireTurn(ctx context.Context, t *turn, key, name string, secs int64, opts driver.AcquireOptions) (*lease, error) {
	owner, value := opts.Owner, ""
	if opts.Election != "" {
		// A candidate's value is its key's value, where etcdctl elect
		// reads it, and not its session's owner: candidates of every
		// value share a session.
		owner, value = "", opts.Owner
	}
	s, err := b.session(ctx, secs, owner)
	if err != nil {
		t.Done()
		if ctx.Err() != nil {
			return nil, driver.Canceled(ctx)
		}
		return nil, err
	}
	if !opts.Wait {
		// One transaction creates the key (with the candidate's value, as
		// Campaign does) and reads the predecessor, as Mutex.TryLock
		// does; concurrency has no try for an election. session.lock
		// does not abandon the transaction when ctx ends, so that the
		// clean-up of a try that found the name held, or was given up,
		// comes after it (an abandoned creation could be applied after
		// the clean-up's delete, and hold the name for nobody).
		rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
		rev, err := s.lock(rctx, name, value, false)
		if err != nil && !errors.Is(err, errHeld) {
			err = b.sortErr(ctx, rctx, err)
		}
		cancel()
		if errors.Is(err, errHeld) {
			b.cleanup(t, s, s.keyOf(name), rev)
			return nil, fmt.Errorf("%w: etcdlock: held", driver.ErrNotAcquired)
		}
		l, err := b.finish(ctx, t, s, key, s.keyOf(name), rev, opts, false, err)
		switch {
		case ctx.Err() == nil:
			return l, err
		case err == nil:
			b.releaseUnwanted(l) // granted as the caller gave up
		}
		return nil, driver.Canceled(ctx)
	}

	// The wait is this package's own (session.lock), not Mutex.Lock, whose
	// watch etcd serves late (see the package documentation). It runs in
	// the caller's goroutine: it returns at the caller's context's end, and
	// finish's clean-up of a failed wait is bounded by the request timeout
	// (a goroutine goes on with it after that).
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A waiter whose session ends stops waiting: its key is gone with the
	// lease, and the lock must never be reported to it.
	stop := context.AfterFunc(s.cs.Ctx(), func() { cancel(ErrSessionLost) })
	defer stop()
	rev, err := s.lock(lctx, name, value, true)
	if err != nil {
		err = b.lockErr(ctx, s, err)
	}
	l, err := b.finish(lctx, t, s, key, s.keyOf(name), rev, opts, false, err)
	switch {
	case ctx.Err() == nil:
		return l, err
	case err == nil:
		b.releaseUnwanted(l) // granted as the caller gave up
	}
	return nil, driver.Canceled(ctx)
}

// lockErr sorts an error of session.lock.
func (b *Backend) lockErr(ctx context.Context, s *session, err error) error {
	switch {
	case s.lostErr() != nil || s.over():
		return fmt.Errorf("%w: %w while waiting", driver.ErrUnavailable, ErrSessionLost)
	case errors.Is(err, errKeyVanished):
		return fmt.Errorf("%w: %w: the waiting key vanished (lease expired or key deleted)", driver.ErrUnavailable, ErrSessionLost)
	}
	return b.sortErr(ctx, nil, err)
}

// releaseUnwanted gives back a lease granted to an acquire that gave up.
func (b *Backend) releaseUnwanted(l *lease) {
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.requestTimeout)
	defer cancel()
	_ = l.Release(ctx)
}

// finish completes an acquire after the try or the wait answered, with the
// create revision of our key etcdKey (0 if unknown): it checks that the
// session still lives and that its lease was confirmed recently enough to
// be usable, and registers the lease. On any failure it deletes our key and
// passes the turn on. A reader (shared) holds no turn: t is nil.
func (b *Backend) finish(ctx context.Context, t *turn, s *session, key, etcdKey string, rev int64, opts driver.AcquireOptions, shared bool, lockErr error) (*lease, error) {
	if lockErr != nil {
		// The key may exist: the Txn that creates it may have taken
		// effect without its reply reaching us. Its create revision is
		// known if the reply came.
		b.cleanup(t, s, etcdKey, rev)
		if err := b.life.CheckOpen(); err != nil {
			return nil, err
		}
		switch {
		case errors.Is(lockErr, errLeaseGone):
			b.loseSession(s, errLeaseGone)
		case errors.Is(lockErr, ErrSessionLost) && s.lostErr() == nil:
			// The waiting key vanished: if the lease went with it, make
			// sure the next acquire does not use this session.
			cctx, cancel := context.WithTimeout(b.ctx, b.cfg.requestTimeout)
			_, _ = s.confirm(cctx, time.Now())
			cancel()
		}
		return nil, lockErr
	}
	l := &lease{
		b: b, s: s, key: key, etcdKey: etcdKey,
		token:     uint64(rev),
		onLost:    opts.OnLost,
		candidacy: opts.Election != "" && !shared,
		shared:    shared,
	}
	if t != nil {
		l.turn.Store(t)
	}
	// A wait can end in success on a session that already ended (its
	// key's read came before etcd expired the lease): whatever the try or
	// the wait said, the session must be live now, and its
	// lease confirmed recently enough for the Client to use the grant.
	v, err := s.confirm(ctx, time.Now().Add(-s.freshFor()))
	if err == nil {
		l.validity = v
		if t != nil {
			t.Set(l) // for Fence; cleared when the turn passes on
		}
		err = s.add(l)
	}
	if err != nil {
		b.cleanup(t, s, l.etcdKey, int64(l.token))
		if cerr := b.life.CheckOpen(); cerr != nil {
			return nil, cerr
		}
		switch lost := s.lostErr(); {
		case lost != nil:
			return nil, fmt.Errorf("%w: granted on a session that had ended: %w", driver.ErrUnavailable, lost)
		case s.over():
			return nil, fmt.Errorf("%w: granted on a session that had ended: %w", driver.ErrUnavailable, ErrSessionLost)
		}
		return nil, err
	}
	return l, nil
}

// cleanup deletes one of our keys under name after a failed or abandoned
// acquire, which holds name's turn, and passes the turn on once etcd has
// confirmed that the key is gone (see dropKey). Only the holder of a name's
// turn creates keys under the name, so the key is ours to delete. rev is
// the key's create revision, or 0 if it is not known. A reader's key,
// which no other acquire writes, is deleted without a turn: t is then nil.
func (b *Backend) cleanup(t *turn, s *session, key string, rev int64) {
	if t != nil {
		t.Set(nil)
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.requestTimeout)
	err := b.deleteKey(ctx, key, rev)
	cancel()
	if err == nil {
		if t != nil {
			t.Done()
		}
		return
	}
	b.dropKey(t, s, key, rev, nil)
}

// dropKey deletes key, one of ours that may linger in etcd, in a goroutine
// that holds the key's lock name's turn t meanwhile and passes it on at the
// end. It tries until etcd confirms that the key is gone, pausing between
// tries (distlock.ExponentialBackoff from dropRetryMin, or the request
// timeout if shorter, to dropRetryMax), or until s ends (the key then goes
// with its lease, which nobody keeps alive) or the Backend closes (Close
// revokes the lease). A key forgotten instead would be kept alive by the
// session and hold the lock for nobody, for as long as the session lives.
// Holding the turn keeps this Backend from creating a key at the same path
// meanwhile; tries of the name through this Backend fail as held.
//
// gone, if not nil, runs when etcd has confirmed, before the turn passes on.
// A reader's key is dropped without a turn: t is then nil.
func (b *Backend) dropKey(t *turn, s *session, key string, rev int64, gone func()) {
	done := func() {
		if t != nil {
			t.Done()
		}
	}
	started := b.life.Go(func() {
		defer done()
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		stop := context.AfterFunc(s.cs.Ctx(), cancel)
		defer stop()
		pauses := driver.ExponentialBackoff(min(dropRetryMin, b.cfg.requestTimeout), dropRetryMax)
		err := driver.Retry(ctx, pauses, func(ctx context.Context) error {
			rctx, cancel := context.WithTimeout(ctx, b.cfg.requestTimeout)
			defer cancel()
			return b.deleteKey(rctx, key, rev)
		})
		if err == nil && gone != nil {
			gone()
		}
	})
	if !started {
		done() // closed: Close revoked the lease
	}
}

// The pauses between the tries of dropKey: after the n-th failure, a random
// time up to dropRetryMin×2^(n-1), capped at dropRetryMax.
const (
	dropRetryMin = 100 * time.Millisecond
	dropRetryMax = 2 * time.Second
)

// deleteKey deletes key, if its create revision is still rev when rev is
// not 0: a key that is gone is not an error.
func (b *Backend) deleteKey(ctx context.Context, key string, rev int64) error {
	if rev <= 0 {
		_, err := b.cli.Delete(ctx, key)
		return err
	}
	_, err := b.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).
		Commit()
	return err
}
