package pglock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	mathrand "math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/distlock/distlock/driver"
)

// Mode is how a Backend holds its locks; see the package documentation
// for which to use when.
type Mode int

const (
	// SessionMode, the default, holds a lock as a session advisory lock on
	// a pool connection kept for the lock's life. It needs direct sessions
	// with the server (or a pooler in session mode).
	SessionMode Mode = iota
	// LeaseMode holds a lock as a row of the table distlock_lease with an
	// expiry by the server's clock, which the Client's watchdog renews.
	// Every call is one statement in its own transaction, so it works
	// through a pooler in transaction mode (PgBouncer's pool_mode =
	// transaction), and no connection is kept per lock.
	LeaseMode
)

// String returns "session" or "lease", the names OpenURL's "mode" takes.
func (m Mode) String() string {
	switch m {
	case SessionMode:
		return "session"
	case LeaseMode:
		return "lease"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// DefaultPollInterval is the default of WithPollInterval.
const DefaultPollInterval = 100 * time.Millisecond

// listenPollFactor stretches the poll interval while a waiter is told of
// releases by LISTEN: polls then only cover releases that sent no
// notification (a row changed by hand).
const listenPollFactor = 10

// WithMode selects how the Backend holds its locks. Default: SessionMode.
func WithMode(m Mode) Option { return func(c *config) { c.mode = m } }

// WithListen gives a LeaseMode Backend a direct session with the server,
// connString (a URL or libpq's keyword/value form, read by pgx), on which
// it runs LISTEN so that a waiter is woken as soon as the key is released,
// and a watch (WatchHolder) at every change of its key's holder.
// It must reach the same database as the pool, and not through a pooler in
// transaction mode (which does not keep a LISTEN). The Backend keeps this
// one connection open until Close, and reconnects when it breaks; until it
// is back, waiters poll. Default: none, and waiters poll (see
// WithPollInterval), and the Backend cannot watch (a Client's Watch
// polls).
func WithListen(connString string) Option { return func(c *config) { c.listen = connString } }

// WithPollInterval sets how often a waiting Acquire of a LeaseMode Backend
// tries again when nothing tells it of a release: every interval without
// WithListen (or while its connection is down), every ten intervals with
// it; each pause is drawn at random between half and one and a half times
// that, so that waiters of several processes do not retry together. A
// waiter also tries again when the current grant expires unless
// refreshed, as the server reported it (plus a random tenth of the
// interval at most). Default: DefaultPollInterval (100ms). It must be
// positive.
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.pollInterval = d } }

// The statements of lease-table mode. Each is one statement and one
// transaction, sent without a named prepared statement
// (pgx.QueryExecModeExec), so that a pooler in transaction mode may run
// each on a different server connection.
const (
	// rowAcquireSQL grants the key's row unless it is held or awaited by
	// earlier waiters, queueing a waiter to live $5 ms, and otherwise
	// reports when to try again (see distlock_lease_wait in schema.sql).
	rowAcquireSQL = `SELECT granted, retry_ms FROM @schema@.distlock_lease_wait($1::pg_catalog.text, $2::pg_catalog.text,
	$3::pg_catalog.text, $4::pg_catalog.int8, $5::pg_catalog.int8)`

	// rowLeaveSQL takes the waiter $2 out of the queue of key $1.
	rowLeaveSQL = `SELECT @schema@.distlock_lease_leave($1::pg_catalog.text, $2::pg_catalog.text)`

	// rowRefreshSQL extends the grant $2 of key $1 to $3 ms from the
	// server's clock, if it has not expired.
	rowRefreshSQL = `SELECT @schema@.distlock_lease_refresh($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8)`

	// rowReleaseSQL frees the grant $2 of key $1 if it has not expired,
	// and notifies the waiters (see distlock_lease_release in schema.sql).
	rowReleaseSQL = `SELECT @schema@.distlock_lease_release($1::pg_catalog.text, $2::pg_catalog.text)`

	// rowListSQL lists the unexpired grants of keys starting with $1,
	// with the key's latest token.
	rowListSQL = `SELECT l.key, f.token, l.owner, l.granted_at, l.expires
FROM @schema@.distlock_lease l JOIN @schema@.distlock_fence f ON f.key OPERATOR(pg_catalog.=) l.key
WHERE pg_catalog.starts_with(l.key, $1::pg_catalog.text) AND l.grant_id IS NOT NULL
	AND l.expires OPERATOR(pg_catalog.>) pg_catalog.now()
ORDER BY l.key COLLATE pg_catalog."C"`
)

// leaseChannel is the LISTEN/NOTIFY channel of releases.
const leaseChannel = "distlock_lease"

// rowLease is one grant of lease-table mode: the key's row names grant.
type rowLease struct {
	b      *Backend
	key    string
	grant  string // the unguessable id every refresh and release names
	token  uint64
	onLost func(error)
	turn   *rowTurn // the key's turn in the Backend, passed on when the grant ends or its validity does; nil for a reader
	shared bool     // a reader: a row of distlock_lease_reader

	// mu guards the fields below, and is held across each statement, so
	// that a lease's Refresh and Release run one at a time.
	mu       sync.Mutex
	validity driver.Validity
	expiry   *time.Timer // passes the turn on at the local end of validity
	end      error       // why the grant ended; nil while it may be held
}

var (
	_ driver.Lease = (*rowLease)(nil)
	_ driver.Lease = (*lease)(nil)
)

// rowTurn is a lease-mode writer's turn of a key in the Backend's queue.
// From before the acquirer queues until its turn is done, the key counts
// one more local writer (Backend.writers), which the key's readers of the
// Backend wait behind, as in session mode.
type rowTurn struct {
	*driver.Turn[struct{}]
	b    *Backend
	once sync.Once
}

// Done passes the turn on and stops counting the writer. It does nothing
// on a nil turn (a reader's), or after the first call.
func (t *rowTurn) Done() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		t.Turn.Done()
		t.b.leaveWriter(t.Key())
	})
}

// ttlMillis is the TTL asked of the server, in whole milliseconds, and
// the validity it gives: the TTL rounded down, or 1ms for less.
func ttlMillis(ttl time.Duration) (int64, time.Duration) {
	ms := max(1, ttl.Milliseconds())
	return ms, time.Duration(ms) * time.Millisecond
}

// grabbed, if not nil, is called when a grab has been granted, before
// the grant is registered (for tests).
var grabbed func()

// writerQueued, if not nil, is called with the key when a waiting
// lease-mode writer has been counted and has its place in the Backend's
// queue, before it waits for its turn (for tests).
var writerQueued func(key string)

// acquireRow is Acquire in lease-table mode.
func (b *Backend) acquireRow(ctx context.Context, key string, opts driver.AcquireOptions) (driver.Lease, error) {
	// actx ends with ctx or at Close.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()

	place, t, ok := enterWriter(b, &b.rowQueue, key, opts.Wait)
	if !ok {
		return nil, fmt.Errorf("%w: pglock: %q is held (or awaited) through this Backend", driver.ErrNotAcquired, key)
	}
	if place != nil {
		if writerQueued != nil {
			writerQueued(key)
		}
		var err error
		if t, err = place.Wait(actx); err != nil {
			b.leaveWriter(key)
			return nil, b.endedErr(ctx)
		}
	}
	turn := &rowTurn{Turn: t, b: b}
	// Counted, so that Close waits for the grab and its clean-up (see settle),
	// and for the release of a grant it made as Close began (registerRow
	// refuses it), before it closes the pool.
	if !b.life.Enter() {
		turn.Done()
		return nil, ErrClosed
	}
	defer b.life.Leave()
	l, err := b.grabRow(actx, key, opts, false)
	if grabbed != nil && err == nil {
		grabbed()
	}
	if err != nil {
		turn.Done()
		if actx.Err() != nil {
			return nil, b.endedErr(ctx)
		}
		return nil, err
	}
	l.turn = turn
	if !b.registerRow(l) {
		rctx, cancel := context.WithTimeout(context.Background(), b.cfg.requestTimeout)
		l.releaseRow(rctx)
		cancel()
		turn.Done()
		return nil, ErrClosed
	}
	return l, nil
}

// grabRow tries for key's row until it is granted, or once without
// opts.Wait; between tries, driver.Wait waits until a release is
// notified, the current grant expires or a poll is due. With shared, it
// asks for a reader's row instead (distlock_lease_acquire_shared).
func (b *Backend) grabRow(ctx context.Context, key string, opts driver.AcquireOptions, shared bool) (*rowLease, error) {
	sql, err := b.schema.ensure(ctx, b.pool)
	if err != nil {
		return nil, err
	}
	ms, ttl := ttlMillis(opts.TTL)
	grant := rand.Text() // also the waiter's name in the key's queue
	acquire := sql.rowAcquire
	if shared {
		grant, acquire = readerPrefix+grant, sql.rowAcquireShared
	}
	// queued is set once a try may have put the waiter in the key's queue,
	// and cleared when a failed try's clean-up takes it out.
	queued := false
	// sub is the waiter's interest in releases of key, taken before each
	// try: a release committed after the try read the row is notified
	// after it.
	var sub *subscription
	defer func() { sub.cancel() }()
	try := func(ctx context.Context) (*rowLease, *driver.Held, error) {
		sub.cancel()
		sub = nil
		var waitMs int64
		if opts.Wait {
			if b.listen != nil {
				sub = b.listen.subscribe(key, grant)
			}
			waitMs = b.waiterLife(sub).Milliseconds()
		}
		sent := time.Now()
		var token, retry pgtype.Int8
		err := b.pool.QueryRow(ctx, acquire, pgx.QueryExecModeExec, key, grant, opts.Owner, ms, waitMs).Scan(&token, &retry)
		switch {
		case err != nil && changedNothing(err):
			// The place an earlier try took, if any, is left by Leave.
			return nil, nil, sortErr("acquire", err)
		case err != nil:
			// The server may still grant the key, or queue the waiter,
			// and the reply never come: free the grant, or it holds the
			// key until it expires, and leave the queue, once the
			// statement has ended, or make sure that it does nothing if
			// it reaches the server later (see abandonRow); that also
			// takes the waiter out of the queue.
			b.settle(ctx, func(ctx context.Context) {
				_ = b.abandonRow(ctx, key, grant, ttl, time.Duration(waitMs)*time.Millisecond)
			})
			queued = false
			return nil, nil, sortErr("acquire", err)
		case token.Valid && token.Int64 > 0:
			l := &rowLease{b: b, key: key, grant: grant, token: uint64(token.Int64), onLost: opts.OnLost, shared: shared,
				validity: driver.Validity{Sent: sent, TTL: ttl}}
			return l, nil, nil
		case token.Valid:
			return nil, nil, fmt.Errorf("pglock: acquire %q: the server returned token %d", key, token.Int64)
		}
		queued = opts.Wait
		next := time.Duration(math.MaxInt64)
		if retry.Valid {
			next = time.Duration(retry.Int64) * time.Millisecond
		}
		return nil, &driver.Held{Wake: sub.notified(), RetryIn: b.pause(sub, next)}, nil
	}
	if !opts.Wait {
		l, held, err := try(ctx)
		if held != nil {
			err = fmt.Errorf("%w: pglock: %q is held", driver.ErrNotAcquired, key)
		}
		return l, err
	}
	return driver.Wait(ctx, driver.Waiter[*rowLease]{
		Try: func(ctx context.Context, _ bool) (*rowLease, *driver.Held, error) { return try(ctx) },
		Leave: func() {
			if queued {
				b.settle(ctx, func(ctx context.Context) {
					_, _ = b.pool.Exec(ctx, sql.rowLeave, pgx.QueryExecModeExec, key, grant)
				})
			}
		},
	})
}

// changedNothing reports whether err, the error of a try's statement, says
// that the statement changed nothing in the server: it was never sent (no
// connection could be made, or ctx had ended before), or the server
// refused it with an error, which rolled its transaction back (not a
// FATAL one, which a server may send after a commit as it ends the
// session).
func changedNothing(err error) bool {
	var connErr *pgconn.ConnectError
	if pgconn.SafeToRetry(err) || errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	severity := pgErr.SeverityUnlocalized // PostgreSQL 9.6 and later
	if severity == "" {
		severity = pgErr.Severity
	}
	return severity == "ERROR"
}

// waiterLife is how long a waiter's row in the key's queue lives unless
// the waiter renews it, which each of its tries does: three times the
// mean pause between tries (twice the longest), so that a live waiter
// keeps its place, and a waiter that died is passed over that long after
// its last try at most.
func (b *Backend) waiterLife(sub *subscription) time.Duration {
	poll := b.cfg.pollInterval
	if sub.live() {
		poll *= listenPollFactor
	}
	return max(3*poll, time.Millisecond)
}

// pause is how long a waiter waits at most before its next try, unless a
// release is notified or the listener's state changes (see listener): the
// current grant's expiry (expires from now, as the server reported it) or
// the next poll, whichever comes first.
func (b *Backend) pause(sub *subscription, expires time.Duration) time.Duration {
	poll := b.cfg.pollInterval
	if sub.live() {
		poll *= listenPollFactor
		b.livePauses.Add(1)
	}
	d := poll/2 + mathrand.N(poll+1)
	if expires < d {
		if e := expires + mathrand.N(b.cfg.pollInterval/10+1); e < d {
			d = e
		}
	}
	return d
}

// settle runs f, a grab's clean-up (its leave of the queue, the release
// of a grant whose reply was lost), before the grab returns: an Acquire
// that gave up leaves nothing behind when it returns, or another
// client's try could still find the key held, or awaited, by it. f gets
// a context of its own, ctx's values without its end (ctx has ended, or
// its statement failed), bounded by the request timeout. The grab is
// counted in b.life (see acquireRow), so the pool is still open, and
// Close waits for it.
func (b *Backend) settle(ctx context.Context, f func(ctx context.Context)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.requestTimeout)
	defer cancel()
	f(ctx)
}

// registerRow records a new lease-table grant and arms its expiry,
// unless the Backend is closed.
func (b *Backend) registerRow(l *rowLease) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.life.Closed() {
		return false
	}
	b.rows[l] = struct{}{}
	l.mu.Lock()
	l.expiry = time.AfterFunc(time.Until(l.validity.Sent.Add(l.validity.TTL)), l.turn.Done)
	l.mu.Unlock()
	return true
}

func (l *rowLease) Token() uint64 { return l.token }

// Validity implements driver.Lease: the TTL, in whole milliseconds, from
// before the statement that granted or last refreshed it was sent. The
// server's expiry is its own clock as that statement ran plus the TTL,
// which is no earlier.
func (l *rowLease) Validity() driver.Validity {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validity
}

// Refresh implements driver.Lease: one statement that extends the row to
// ttl from the server's clock if it still names this grant and has not
// expired. Otherwise the grant is over, and Refresh returns an error
// matching driver.ErrLockLost. A failure to reach the server changes
// nothing here (the error matches driver.ErrUnavailable): the Client's
// deadline decides when the grant must be taken for lost.
func (l *rowLease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := checkRefresh(ctx, ttl); err != nil {
		return driver.Validity{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.end != nil {
		return driver.Validity{}, l.end
	}
	ms, v := ttlMillis(ttl)
	sent := time.Now()
	var ok bool
	refresh := l.b.schema.sql.rowRefresh
	if l.shared {
		refresh = l.b.schema.sql.rowRefreshShared
	}
	if err := l.b.pool.QueryRow(ctx, refresh, pgx.QueryExecModeExec, l.key, l.grant, ms).Scan(&ok); err != nil {
		return driver.Validity{}, sortErr("refresh", err)
	}
	if !ok {
		return driver.Validity{}, l.endLocked(l.lostErr("it had expired, or was taken after it expired"))
	}
	l.validity = driver.Validity{Sent: sent, TTL: v}
	l.expiry.Reset(time.Until(sent.Add(v)))
	return l.validity, nil
}

// Release implements driver.Lease: one statement that frees the row if
// it still names this grant and has not expired, and notifies the
// waiters. If it had expired (taken by another or not) Release returns an
// error matching driver.ErrLockLost and changes nothing. If the server
// cannot be reached the error matches driver.ErrUnavailable, and the
// grant is given up all the same: it ends when it expires.
func (l *rowLease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.end != nil {
		return l.endedLocked()
	}
	released, err := l.releaseStatement(ctx)
	switch {
	case err != nil:
		l.endLocked(l.lostErr("its release did not reach the server, and it ends when it expires"))
		return sortErr("release", err)
	case !released:
		return l.endLocked(l.lostErr("it had expired, or was taken after it expired"))
	}
	l.endLocked(errReleased)
	return nil
}

// errReleased is the end of a grant released by its holder.
var errReleased = errors.New("pglock: released")

// releaseStatement sends the release; callers hold l.mu unless the grant
// has ended.
func (l *rowLease) releaseStatement(ctx context.Context) (bool, error) {
	var released bool
	release := l.b.schema.sql.rowRelease
	if l.shared {
		release = l.b.schema.sql.rowReleaseShared
	}
	err := l.b.pool.QueryRow(ctx, release, pgx.QueryExecModeExec, l.key, l.grant).Scan(&released)
	return released, err
}

// releaseRow frees the row of a grant that was never handed out.
func (l *rowLease) releaseRow(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.releaseStatement(ctx)
}

// checkRefresh checks the arguments of a Refresh.
func checkRefresh(ctx context.Context, ttl time.Duration) error {
	if err := driver.CheckTTL(ttl); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	return nil
}

// lostErr is the error of a grant found to be over.
func (l *rowLease) lostErr(why string) error {
	return fmt.Errorf("%w: pglock: %q (token %d): %s", driver.ErrLockLost, l.key, l.token, why)
}

// endLocked ends the grant with err, passes the key's turn on and returns
// err.
func (l *rowLease) endLocked(err error) error {
	if l.end == nil {
		l.end = err
		if l.expiry != nil {
			l.expiry.Stop()
		}
		l.b.forgetRow(l)
		if l.turn != nil {
			l.turn.Done()
		}
	}
	return err
}

// endedLocked is the error of a call on a grant that has ended.
func (l *rowLease) endedLocked() error {
	if l.end == errReleased {
		return fmt.Errorf("%w: pglock: %q (token %d) was released", driver.ErrLockLost, l.key, l.token)
	}
	return l.end
}

// closeRow gives the grant up as the Backend closes, telling its holder
// before the row is freed: once it is, another may be granted the key.
func (l *rowLease) closeRow(ctx context.Context) {
	l.mu.Lock()
	if l.end != nil {
		l.mu.Unlock()
		return
	}
	err := l.endLocked(l.lostErr("the Backend was closed"))
	l.mu.Unlock()
	// OnLost runs without l.mu: it may call back into the lease, or into
	// the Client, which may call the lease. The grant has ended, so
	// nothing else uses the row meanwhile.
	if l.onLost != nil {
		l.onLost(err)
	}
	_, _ = l.releaseStatement(ctx)
}

// forgetRow removes an ended lease-table grant.
func (b *Backend) forgetRow(l *rowLease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.rows, l)
}

// listRows is List in lease-table mode: the unexpired grants, each key's
// unexpired readers after its exclusive holder, by token, with Shared
// set; a role that may not read distlock_lease_reader (SELECT on the
// tables of an earlier version was granted before the migration that
// added it) lists the exclusive grants alone.
func (b *Backend) listRows(ctx context.Context, prefix string) ([]driver.Holder, error) {
	sql, err := b.schema.find(ctx, b.pool, "distlock_lease", "distlock_fence")
	if sql == nil {
		return nil, err // nil, nil: no lease was ever granted
	}
	if sql.rowListReaders != "" {
		hs, err := b.listRowsWith(ctx, sql.rowListReaders, prefix, true)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" { // insufficient_privilege
			return hs, err
		}
	}
	return b.listRowsWith(ctx, sql.rowList, prefix, false)
}

// listRowsWith runs listRows' query, whose rows have a last column Shared
// with shared.
func (b *Backend) listRowsWith(ctx context.Context, query, prefix string, shared bool) ([]driver.Holder, error) {
	rows, err := b.pool.Query(ctx, query, pgx.QueryExecModeExec, prefix)
	if err != nil {
		return nil, sortErr("list", err)
	}
	defer rows.Close()
	var hs []driver.Holder
	for rows.Next() {
		var (
			h     driver.Holder
			token int64
		)
		dest := []any{&h.Key, &token, &h.Owner, &h.Since, &h.Expires}
		if shared {
			dest = append(dest, &h.Shared)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, sortErr("list", err)
		}
		h.Token = uint64(token)
		hs = append(hs, h)
	}
	if err := rows.Err(); err != nil {
		return nil, sortErr("list", err)
	}
	return hs, nil
}
