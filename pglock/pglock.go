package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Lister  = (*Backend)(nil)
)

// Defaults of the options.
const (
	DefaultRequestTimeout = 5 * time.Second
	DefaultLossGrace      = time.Second
)

// Option configures a Backend.
type Option func(*config)

type config struct {
	requestTimeout time.Duration
	lossGrace      time.Duration
	mode           Mode
	listen         string // WithListen's connection string
	pollInterval   time.Duration
}

// WithLossGrace sets how long the server waits, holding the lock, before
// it grants a key whose previous grant was lost rather than released (its
// session was terminated, crashed or broke). The server tells a holder that
// it ends its session as it releases the lock, and the holder's context is
// cancelled when that news arrives; the grace lets it arrive, and the
// holder stop, before the next holder can act. A holder paused for longer
// than the grace is not covered: fence its writes. Default:
// DefaultLossGrace (1s). A try (distlock.TryAcquire) of such a key waits
// the grace too. It must not be negative; 0 grants at once.
//
// The grace counts from the loss where the server knows when that was: a
// grant made before the server last started (a crash, a restart) ended by
// then, and the next grant waits only what is left of the grace since the
// start. Otherwise it counts from the next grant, which is the moment of
// the loss for a waiter queued in the server then (it is granted the lock
// as the session ends); for a grant that comes later the server cannot
// tell: PostgreSQL keeps no record of when a session ended
// (pg_stat_activity lists live sessions only, and no hook runs at a
// session's end), so the whole grace is waited.
func WithLossGrace(d time.Duration) Option { return func(c *config) { c.lossGrace = d } }

// WithRequestTimeout bounds what the Backend does on its own behalf, with no
// caller's context to bound it: cancelling a wait in the server (the cancel
// request, then the wait's end), closing a connection, and in LeaseMode
// the clean-up of a try that failed or whose context ended, which an
// Acquire waits for before it returns. Default:
// DefaultRequestTimeout (5s). It must be positive.
func WithRequestTimeout(d time.Duration) Option { return func(c *config) { c.requestTimeout = d } }

// Backend is a driver.Backend over PostgreSQL: session advisory locks
// (SessionMode, the default) or rows of a lease table (LeaseMode). See the
// package documentation for its safety model. It is safe for concurrent
// use.
//
// In SessionMode each held lock, and each key that an Acquire of this
// Backend is waiting for, takes one connection of the pool for as long as
// it lasts. In LeaseMode connections are taken for one statement at a
// time.
type Backend struct {
	pool     *pgxpool.Pool
	ownsPool bool // OpenURL made it: Close closes it
	cfg      config

	// queue holds the acquirers of each key within the Backend: only the one
	// that has the turn asks the server, and it keeps the turn while it
	// holds the lease (the turn's holder). Acquirers of one process are
	// thus served first come first served with one connection per key.
	// rowQueue does the same in LeaseMode, where a grant also passes the
	// turn on when its validity ends.
	queue    driver.Queue[*lease]
	rowQueue driver.Queue[struct{}]

	// writers counts, per key, the exclusive acquirers that have the
	// key's turn or wait for it (see writerTurn, rowTurn): a shared
	// acquirer of the key waits behind them in queue (rowQueue in
	// LeaseMode), and a shared try fails while there is one. A writer is
	// counted, and a reader reads the count, in one step under wmu with
	// their places in the queue (see enterWriter). A key no writer asks
	// takes no entry.
	wmu     sync.Mutex
	writers map[string]int

	// permitLine holds the AcquirePermits of each semaphore within the
	// Backend: only the one that has the turn asks the server, until it is
	// granted or gives up (see AcquirePermit).
	permitLine driver.Queue[struct{}]

	// listen is the LISTEN session: in LeaseMode with WithListen, started
	// by New; in SessionMode, on a connection made with the pool's
	// connection config, started by the first WatchHolder, unless the
	// pool has a connect hook; nil otherwise.
	listen     *listener
	livePauses atomic.Int64 // pauses of waiters told of releases by listen, for tests

	schema schemaState

	ctx    context.Context // ends at Close, ending acquires in progress
	cancel context.CancelFunc

	// life says whether the Backend is open and tracks its goroutines
	// (the watchers of held leases, the listener) and, in LeaseMode, its
	// acquires in progress; Close shuts it holding mu, so that under mu it
	// stays as read.
	life *driver.Tracker

	mu      sync.Mutex
	leases  map[*lease]struct{}    // held leases; guarded by mu
	rows    map[*rowLease]struct{} // held LeaseMode grants; guarded by mu
	permits map[*permit]struct{}   // held permits, both modes; guarded by mu
}

// New returns a Backend over pool. The Backend does not own pool: Close
// leaves it open, and pool must stay open until the Backend is closed (and
// pgxpool's Close waits for the connections that held locks to come back).
// In SessionMode, the default, the pool's connections must be direct
// sessions with the server, or through a pooler in session mode: a pooler
// in transaction mode would hand the session that holds a lock to another
// client. For a pool through a pooler in transaction mode, use
// WithMode(LeaseMode). A bad option returns an error matching
// driver.ErrInvalidOption.
func New(pool *pgxpool.Pool, opts ...Option) (*Backend, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pglock: nil pool", driver.ErrInvalidOption)
	}
	cfg := config{requestTimeout: DefaultRequestTimeout, lossGrace: DefaultLossGrace, pollInterval: DefaultPollInterval}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	switch {
	case cfg.requestTimeout <= 0:
		return nil, fmt.Errorf("%w: pglock: request timeout %v is not positive", driver.ErrInvalidOption, cfg.requestTimeout)
	case cfg.lossGrace < 0 || cfg.lossGrace > driver.MaxTTL:
		return nil, fmt.Errorf("%w: pglock: loss grace %v is not in [0, %v]", driver.ErrInvalidOption, cfg.lossGrace, driver.MaxTTL)
	case cfg.mode != SessionMode && cfg.mode != LeaseMode:
		return nil, fmt.Errorf("%w: pglock: unknown mode %v", driver.ErrInvalidOption, cfg.mode)
	case cfg.pollInterval <= 0 || cfg.pollInterval > driver.MaxTTL:
		return nil, fmt.Errorf("%w: pglock: poll interval %v is not in (0, %v]", driver.ErrInvalidOption, cfg.pollInterval, driver.MaxTTL)
	case cfg.listen != "" && cfg.mode != LeaseMode:
		return nil, fmt.Errorf("%w: pglock: a listen connection is for LeaseMode only", driver.ErrInvalidOption)
	}
	b := &Backend{pool: pool, cfg: cfg, life: driver.NewTracker(ErrClosed), leases: map[*lease]struct{}{}, rows: map[*rowLease]struct{}{}}
	if cfg.listen != "" {
		lc, err := pgx.ParseConfig(cfg.listen)
		if err != nil {
			return nil, fmt.Errorf("%w: pglock: listen connection: %w", driver.ErrInvalidOption, driver.Scrub(err, cfg.listen))
		}
		b.listen = newListener(lc)
	} else if pc := pool.Config(); cfg.mode == SessionMode && pc.BeforeConnect == nil && pc.AfterConnect == nil {
		// The listener connects with pgx.ConnectConfig, which runs no
		// pool hook: one that supplies a credential, or sets the session
		// up, would be missing, and the listener would fail, or listen
		// where the pool's sessions do not work.
		b.listen = newListener(pc.ConnConfig.Copy())
	}
	b.schema.init()
	b.ctx, b.cancel = context.WithCancel(context.Background())
	if cfg.mode == LeaseMode && b.listen != nil && b.listen.start() {
		b.life.Go(func() { b.listen.run(b.ctx, b.cfg.requestTimeout) })
	}
	return b, nil
}

// Pool returns the pool the Backend uses.
func (b *Backend) Pool() *pgxpool.Pool { return b.pool }

// Close ends every Acquire in progress with ErrClosed and gives up every
// lock the Backend holds, by closing its connection in SessionMode and by
// releasing its row in LeaseMode (bounded by the request timeout; a row
// not released expires), and every permit, by releasing its row; their
// holders are told through OnLost, with an
// error matching driver.ErrLockLost. It closes
// the pool only if OpenURL opened it. Calling Close again does nothing.
func (b *Backend) Close() error {
	b.mu.Lock()
	if !b.life.Shut() {
		b.mu.Unlock()
		return nil
	}
	held := make([]*lease, 0, len(b.leases))
	for l := range b.leases {
		held = append(held, l)
	}
	rows := make([]*rowLease, 0, len(b.rows))
	for l := range b.rows {
		rows = append(rows, l)
	}
	permits := make([]*permit, 0, len(b.permits))
	for p := range b.permits {
		permits = append(permits, p)
	}
	b.mu.Unlock()
	b.cancel()
	for _, l := range held {
		l.lose(ErrClosed)
	}
	if len(rows) > 0 || len(permits) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.requestTimeout)
		for _, l := range rows {
			l.closeRow(ctx)
		}
		for _, p := range permits {
			p.closePermit(ctx)
		}
		cancel()
	}
	b.life.Wait()
	if b.ownsPool {
		b.pool.Close()
	}
	return nil
}

// Acquire implements driver.Backend. An Acquire that fails, or whose
// ctx ends, returns once it has undone what it may have left in the
// server (a grant made all the same, a place in the queue), each step of
// that bounded by the request timeout (see WithRequestTimeout and the
// package documentation).
//
// In LeaseMode the lock is the key's row of distlock_lease, granted for
// opts.TTL (in whole milliseconds) from the server's clock by one
// statement, and a waiting Acquire tries again when a release is notified,
// when the current grant expires, or at the next poll (see
// WithPollInterval); the rest of this comment is about SessionMode.
//
// The lock is pg_advisory_lock(hashtextextended(key, 0)) on a connection
// taken from the pool and kept for the lock's life; a waiting Acquire waits
// in the server's lock queue, and when ctx ends the server is asked to
// cancel the wait (its connection is then closed, not returned to the
// pool, once a grant the server made all the same is released). The
// token is incremented in the same statement, once the lock is held.
// opts.TTL is checked but the grant has no time bound: its Validity has
// TTL 0. opts.OnLost is called when the connection breaks.
//
// Same-key acquires through one Backend queue in this process, first come
// first served, and only the first of them is in the server; a try
// (opts.Wait false) fails with driver.ErrNotAcquired when the key is
// held or awaited through this Backend, or held in the server. The lock
// excludes the key's shared grants (AcquireShared, psql's
// pg_advisory_lock_shared of the id): it waits for them in the server's
// queue, and a try fails while one is held.
func (b *Backend) Acquire(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckAcquire(ctx, key, opts); err != nil {
		return nil, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	if b.cfg.mode == LeaseMode {
		return b.acquireRow(ctx, key, opts)
	}
	// actx ends with ctx or at Close.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()

	place, t, ok := enterWriter(b, &b.queue, key, opts.Wait)
	if !ok {
		return nil, fmt.Errorf("%w: pglock: %q is held (or awaited) through this Backend", driver.ErrNotAcquired, key)
	}
	if place != nil {
		var err error
		if t, err = place.Wait(actx); err != nil {
			b.leaveWriter(key)
			return nil, b.endedErr(ctx)
		}
	}
	turn := &writerTurn{Turn: t, b: b}
	l, err := b.grab(actx, turn, key, opts)
	if err != nil {
		turn.Done()
		if actx.Err() != nil {
			return nil, b.endedErr(ctx)
		}
		return nil, err
	}
	return l, nil
}

// endedErr is the error of an acquire whose context, ctx or the Backend's,
// ended.
func (b *Backend) endedErr(ctx context.Context) error {
	if ctx.Err() == nil && b.ctx.Err() != nil {
		return ErrClosed
	}
	return driver.Canceled(ctx)
}

// grab takes a connection, the lock and a token, holding key's turn, which
// the lease keeps if it succeeds.
func (b *Backend) grab(ctx context.Context, turn *writerTurn, key string, opts driver.AcquireOptions) (*lease, error) {
	conn, err := b.conn(ctx, opts.Wait)
	if err != nil {
		return nil, err
	}
	sql, err := b.schema.ensure(ctx, conn)
	if err != nil {
		conn.Release()
		return nil, err
	}
	token, pid, err := b.lock(ctx, conn, sql, key, opts, false)
	if err != nil {
		return nil, err // lock discarded the connection
	}
	if token == 0 {
		conn.Release()
		return nil, fmt.Errorf("%w: pglock: %q is held", driver.ErrNotAcquired, key)
	}
	l := &lease{b: b, key: key, token: token, pid: pid, onLost: opts.OnLost, conn: conn, turn: turn}
	turn.Set(l)
	if !b.register(l) {
		b.discard(conn)
		return nil, ErrClosed
	}
	return l, nil
}

// conn takes a connection from the pool. A try waits for one (a free one,
// or a new one connected) only up to the request timeout: a pool whose
// connections all hold locks would otherwise keep it until ctx ends.
func (b *Backend) conn(ctx context.Context, wait bool) (*pgxpool.Conn, error) {
	pctx := ctx
	if !wait {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, b.cfg.requestTimeout)
		defer cancel()
	}
	conn, err := b.pool.Acquire(pctx)
	if err == nil {
		return conn, nil
	}
	if ctx.Err() == nil && pctx.Err() != nil {
		return nil, fmt.Errorf("%w: pglock: no connection from the pool within %v (each held lock keeps one; the pool has at most %d)",
			driver.ErrUnavailable, b.cfg.requestTimeout, b.pool.Config().MaxConns)
	}
	return nil, sortErr("connect", err)
}

// The pauses between the cancel requests of a statement that goes on:
// from cancelRetryMin, doubling, up to cancelRetryMax. A cancel request
// that arrives while the statement runs ends it at once.
const (
	cancelRetryMin = 20 * time.Millisecond
	cancelRetryMax = time.Second
)

// acquireSQL takes the lock and then increments the token (see schema.sql).
// Like every statement of the package, it names each function and
// operator with its schema, and casts its parameters to the types the
// function takes, so that no object another role created in a schema of
// the search_path can be called instead.
// It also returns the server's pid of the session, which a pooler such as
// PgBouncer does not announce (the pid it announces is its own), for
// SetOwner's check that this session still holds the lock.
const acquireSQL = `SELECT @schema@.distlock_acquire($1::pg_catalog.text, $2::pg_catalog.bool, $3::pg_catalog.text, $4::pg_catalog.interval), pg_catalog.pg_backend_pid()`

// lock runs distlock_acquire on conn and returns the new token, or 0 when a
// try found the lock held, and the session's pid on the server. It runs the statement with a context of its own
// and, when ctx ends first, sends the server cancel requests until the
// statement has ended, so that the server stops waiting too (a connection
// merely closed would go on waiting in the server until it next tried to
// answer, and be granted the lock meanwhile). A statement that failed or
// was cancelled may leave the session lock held (a session lock outlives
// the failed transaction that took it), the server may grant the lock
// before the cancel request arrives, and a cancel request may arrive late
// and hit a later statement: lock then gives the lock up and closes the
// connection rather than return it to the pool (see abandon).
//
// With shared it runs distlock_acquire_shared instead, for a shared grant,
// and abandon then gives up the shared lock.
func (b *Backend) lock(ctx context.Context, conn *pgxpool.Conn, sql *statements, key string, opts driver.AcquireOptions, shared bool) (uint64, int32, error) {
	query := sql.acquire
	if shared {
		query = sql.acquireShared
	}
	qctx, qcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer qcancel()
	pg := conn.Conn().PgConn()
	finished := make(chan struct{})
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		cctx, cancel := context.WithTimeout(context.Background(), b.cfg.requestTimeout)
		defer cancel()
		// A cancel request that the server takes before the statement
		// has started (ctx ended as it was sent) is ignored, and the
		// statement then waits in the server's queue: send it again until
		// the statement has ended.
		for pause := cancelRetryMin; ; pause = min(2*pause, cancelRetryMax) {
			if pg.CancelRequest(cctx) != nil {
				qcancel() // breaks the connection; the server then ends the session
				return
			}
			t := time.NewTimer(pause)
			select {
			case <-finished:
				t.Stop()
				return
			case <-cctx.Done():
				t.Stop()
				qcancel()
				return
			case <-t.C:
			}
		}
	})
	var token pgtype.Int8
	var pid int32
	err := conn.QueryRow(qctx, query, key, opts.Wait, opts.Owner, b.cfg.lossGrace).Scan(&token, &pid)
	close(finished)
	if !stop() {
		<-fired
		var granted uint64
		if err == nil && token.Int64 > 0 {
			granted = uint64(token.Int64) // the server granted it all the same
		}
		b.abandon(conn, sql, key, granted, shared)
		return 0, 0, b.endedErr(ctx)
	}
	switch {
	case err != nil:
		b.abandon(conn, sql, key, 0, shared)
		return 0, 0, sortErr("acquire", err)
	case !token.Valid:
		return 0, 0, nil
	case token.Int64 <= 0:
		b.abandon(conn, sql, key, 0, shared)
		return 0, 0, fmt.Errorf("pglock: acquire %q: the server returned token %d", key, token.Int64)
	}
	return uint64(token.Int64), pid, nil
}

// abandon gives up what the session of conn may hold after an acquire
// that failed or whose context ended, and then closes conn (a late cancel
// request could otherwise hit its next statement): a grant the server
// made all the same (token, 0 for none) is released as Release does,
// marked released, and otherwise the key's lock is unlocked if the session
// holds it (a session lock outlives the failed statement that took it).
// Closing the connection alone gives the lock up only when the server
// ends the session, a moment after the Acquire has returned, and leaves a
// grant marked lost, which makes the next grant wait for the loss grace.
// Closing is all it does when the connection is broken. With shared it
// gives up a shared grant (releaseSharedSQL) or the shared lock.
func (b *Backend) abandon(conn *pgxpool.Conn, sql *statements, key string, token uint64, shared bool) {
	if !conn.Conn().IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.requestTimeout)
		var unlocked bool
		err := pgx.ErrNoRows
		if shared {
			if token > 0 {
				_ = conn.QueryRow(ctx, sql.releaseShared, key, int64(token)).Scan(&unlocked)
			} else {
				_ = conn.QueryRow(ctx, unlockSharedSQL, key).Scan(&unlocked)
			}
			err = nil
		} else if token > 0 {
			err = conn.QueryRow(ctx, sql.release, key, int64(token)).Scan(&unlocked)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			_ = conn.QueryRow(ctx, unlockSQL, key).Scan(&unlocked)
		}
		cancel()
	}
	b.discard(conn)
}

// discard closes conn, taking it out of the pool: the server ends its
// session, which releases every lock the session holds.
func (b *Backend) discard(conn *pgxpool.Conn) {
	c := conn.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.requestTimeout)
	defer cancel()
	_ = c.Close(ctx) // the socket is closed whatever the error
}

// register records a new lease and starts watching its connection, unless
// the Backend is closed.
func (b *Backend) register(l *lease) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.life.Closed() {
		return false
	}
	b.leases[l] = struct{}{}
	l.mu.Lock()
	l.watchLocked()
	l.mu.Unlock()
	return true
}

// forget removes an ended lease.
func (b *Backend) forget(l *lease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.leases, l)
}
