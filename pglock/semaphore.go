package pglock

// The permits of counting semaphores (driver.Semaphores), in both modes:
// rows of distlock_permit with an expiry by the server's clock, written
// under the semaphore's lock (see version 6 in schema.sql).

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Semaphores = (*Backend)(nil)
	_ driver.SlotLease  = (*permit)(nil)
)

// The statements of permits, in both modes. Each is one statement and
// one transaction, sent without a named prepared statement, so that they
// work through a pooler in transaction mode.
const (
	// permitAcquireSQL grants a permit of the semaphore $1 to the grant
	// $2, or queues it, or reports the stored limit that refuses it (see
	// distlock_permit_acquire in schema.sql).
	permitAcquireSQL = `SELECT granted, granted_slot, stored_limit, retry_ms FROM @schema@.distlock_permit_acquire($1::pg_catalog.text,
	$2::pg_catalog.text, $3::pg_catalog.text, $4::pg_catalog.int8, $5::pg_catalog.int4, $6::pg_catalog.bool, $7::pg_catalog.int8)`

	// permitRefreshSQL extends the permit $2 of the semaphore $1 to $3 ms
	// from the server's clock, if it has not expired.
	permitRefreshSQL = `SELECT @schema@.distlock_permit_refresh($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8)`

	// permitReleaseSQL gives the permit $2 of the semaphore $1 back, if
	// it has not expired, and wakes the first waiter.
	permitReleaseSQL = `SELECT @schema@.distlock_permit_release($1::pg_catalog.text, $2::pg_catalog.text)`

	// permitLeaveSQL takes the waiter $2 out of the line of the semaphore $1.
	permitLeaveSQL = `SELECT @schema@.distlock_permit_leave($1::pg_catalog.text, $2::pg_catalog.text)`

	// permitAbandonSQL cleans up after a try of the grant $2 whose outcome
	// is unknown, leaving its tombstone for $3 ms.
	permitAbandonSQL = `SELECT @schema@.distlock_permit_abandon($1::pg_catalog.text, $2::pg_catalog.text, $3::pg_catalog.int8)`

	// permitsSQL reads the semaphore $1 in one snapshot: its stored limit
	// and how many live waiters it has, on every row, and a row per live
	// permit (one row with NULL permit columns when none is live), by
	// token.
	permitsSQL = `SELECT s.max_permits,
	(SELECT pg_catalog.count(*) FROM @schema@.distlock_permit_waiter w
		WHERE w.key OPERATOR(pg_catalog.=) s.key AND w.expires OPERATOR(pg_catalog.>) pg_catalog.now()),
	p.token, p.slot, p.owner, p.granted_at, p.expires
FROM @schema@.distlock_semaphore s
LEFT JOIN @schema@.distlock_permit p ON p.key OPERATOR(pg_catalog.=) s.key AND p.expires OPERATOR(pg_catalog.>) pg_catalog.now()
WHERE s.key OPERATOR(pg_catalog.=) $1::pg_catalog.text
ORDER BY p.token`
)

// minPermitWaiterLife is the shortest life of a waiter's row in a
// semaphore's line: its row keeps the stored limit, which must not lapse
// between two tries of a live waiter on a loaded machine.
const minPermitWaiterLife = time.Second

// permitWaiterLife is how long a waiter's row in a semaphore's line lives
// unless the waiter renews it, which each of its tries does: as for a
// lock's waiter (see waiterLife), and a second at least.
func (b *Backend) permitWaiterLife(sub *subscription) time.Duration {
	return max(b.waiterLife(sub), minPermitWaiterLife)
}

// AcquirePermit implements driver.Semaphores, in both modes alike: a
// permit is a row of distlock_permit, granted for opts.TTL (in whole
// milliseconds) from the server's clock under the semaphore's lock, with
// a token drawn from the key's counter as it is granted, and renewed by
// the Client's watchdog (Refresh). A SessionMode Backend keeps no
// connection per permit: its permits are leases with a TTL, as
// LeaseMode's locks are.
//
// The AcquirePermits of one semaphore through one Backend take turns, in
// arrival order, and only the one whose turn it is asks the server (a try
// is refused while another has the turn). A waiting AcquirePermit whose
// turn it is queues a row in the semaphore's line (in order of arrival,
// by the server's sequence), which each of its tries renews,
// and tries again when a release names it (LISTEN on the Backend's
// LISTEN session: WithListen in LeaseMode, a session of its own in
// SessionMode), when the first permit expires, or at the next poll (see
// WithPollInterval). An AcquirePermit that fails, or whose ctx ends,
// returns once it has left the line and given back a permit granted as
// it left, each step bounded by the request timeout; what a step fails to
// undo lapses (a permit within its TTL, a place in line within its
// life).
func (b *Backend) AcquirePermit(ctx context.Context, key string, sem driver.Semaphore, opts driver.AcquireOptions) (driver.Lease, error) {
	if err := driver.CheckPermit(ctx, key, sem, opts); err != nil {
		return nil, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	// actx ends with ctx or at Close.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()
	// The Backend's askers of the semaphore take turns, in arrival order,
	// and only the one whose turn it is asks the server, and waits in its
	// line: the turn passes on when it is granted or gives up. A try is
	// refused while another asker has the turn.
	var turn *driver.Turn[struct{}]
	if opts.Wait {
		t, err := b.permitLine.Wait(actx, key)
		if err != nil {
			return nil, b.endedErr(ctx)
		}
		turn = t
	} else if t, ok := b.permitLine.Try(key); ok {
		turn = t
	} else {
		return nil, fmt.Errorf("%w: pglock: a permit of %q is asked for (or awaited) through this Backend", driver.ErrNotAcquired, key)
	}
	defer turn.Done()
	// Counted, so that Close waits for the grab and its clean-up, and
	// for the release of a permit granted as Close began.
	if !b.life.Enter() {
		return nil, ErrClosed
	}
	defer b.life.Leave()
	if opts.Wait && b.listen != nil && b.listen.start() {
		// SessionMode starts its LISTEN session on first use.
		if !b.life.Go(func() { b.listen.run(b.ctx, b.cfg.requestTimeout) }) {
			return nil, ErrClosed
		}
	}
	p, err := b.grabPermit(actx, key, sem, opts)
	if err != nil {
		if actx.Err() != nil {
			return nil, b.endedErr(ctx)
		}
		return nil, err
	}
	if !b.registerPermit(p) {
		rctx, cancel := context.WithTimeout(context.Background(), b.cfg.requestTimeout)
		_, _ = p.releaseStatement(rctx)
		cancel()
		return nil, ErrClosed
	}
	return p, nil
}

// grabPermit tries for a permit until it is granted, or once without
// opts.Wait; between tries, driver.Wait waits until a release names this
// waiter, the first permit expires or a poll is due.
func (b *Backend) grabPermit(ctx context.Context, key string, sem driver.Semaphore, opts driver.AcquireOptions) (*permit, error) {
	sql, err := b.schema.ensure(ctx, b.pool)
	if err != nil {
		return nil, err
	}
	ms, ttl := ttlMillis(opts.TTL)
	grant := rand.Text() // also the waiter's name in the semaphore's line
	// queued is set once a try may have put the waiter in the line.
	queued := false
	// sub is the waiter's interest in releases that name it, taken before
	// each try: a release committed after the try read the line is
	// notified after it.
	var sub *subscription
	defer func() { sub.cancel() }()
	try := func(ctx context.Context) (*permit, *driver.Held, error) {
		sub.cancel()
		sub = nil
		var waitMs int64
		if opts.Wait {
			if b.listen != nil {
				sub = b.listen.subscribe(key, grant)
			}
			waitMs = b.permitWaiterLife(sub).Milliseconds()
		}
		// The validity counts from after the connection is had: its
		// server's clock reading is later still, and a connection made for the
		// try (a fork of a server process, on a loaded server) does not
		// eat the permit's TTL.
		conn, err := b.pool.Acquire(ctx)
		if err != nil {
			return nil, nil, sortErr("acquire permit", err) // nothing was sent
		}
		sent := time.Now()
		var token, retry pgtype.Int8
		var slot, stored pgtype.Int4
		err = conn.QueryRow(ctx, sql.permitAcquire, pgx.QueryExecModeExec, key, grant, opts.Owner, ms,
			int32(sem.Limit), sem.Slots, waitMs).Scan(&token, &slot, &stored, &retry)
		conn.Release()
		switch {
		case err != nil && changedNothing(err):
			return nil, nil, sortErr("acquire permit", err)
		case err != nil:
			// The server may still grant the permit, or queue the
			// waiter, and the reply never come: see abandonRow.
			b.settle(ctx, func(ctx context.Context) {
				keep := max(ttl, time.Duration(waitMs)*time.Millisecond, minTombstone)
				_, _ = b.pool.Exec(ctx, sql.permitAbandon, pgx.QueryExecModeExec, key, grant, keep.Milliseconds())
			})
			queued = false
			return nil, nil, sortErr("acquire permit", err)
		case token.Valid && token.Int64 > 0:
			p := &permit{b: b, key: key, grant: grant, token: uint64(token.Int64), slot: -1, onLost: opts.OnLost,
				validity: driver.Validity{Sent: sent, TTL: ttl}}
			if slot.Valid {
				p.slot = int(slot.Int32)
			}
			if sem.Slots && p.slot < 0 {
				return p, nil, fmt.Errorf("pglock: acquire permit %q: the server named no slot", key)
			}
			return p, nil, nil
		case token.Valid:
			return nil, nil, fmt.Errorf("pglock: acquire permit %q: the server returned token %d", key, token.Int64)
		case stored.Valid && int(stored.Int32) != sem.Limit:
			// Refused, and out of the line.
			queued = false
			return nil, nil, &driver.LimitError{Stored: int(stored.Int32), Asked: sem.Limit}
		}
		queued = opts.Wait
		next := time.Duration(math.MaxInt64)
		if retry.Valid {
			next = time.Duration(retry.Int64) * time.Millisecond
		}
		return nil, &driver.Held{Wake: sub.notified(), RetryIn: b.pause(sub, next)}, nil
	}
	// giveBack gives back a permit granted to a try whose result is not
	// handed out, as abandon does, so that it does not hold a permit
	// until it expires.
	giveBack := func(p *permit) {
		b.settle(ctx, func(ctx context.Context) { _, _ = p.releaseStatement(ctx) })
	}
	if !opts.Wait {
		p, held, err := try(ctx)
		if p != nil && err != nil {
			giveBack(p)
			p = nil
		}
		if held != nil {
			err = fmt.Errorf("%w: pglock: all %d permits of %q are held, or awaited", driver.ErrNotAcquired, sem.Limit, key)
		}
		return p, err
	}
	p, err := driver.Wait(ctx, driver.Waiter[*permit]{
		Try: func(ctx context.Context, _ bool) (*permit, *driver.Held, error) {
			p, held, err := try(ctx)
			if p != nil && err != nil {
				giveBack(p)
				p = nil
			}
			return p, held, err
		},
		Leave: func() {
			if queued {
				b.settle(ctx, func(ctx context.Context) {
					_, _ = b.pool.Exec(ctx, sql.permitLeave, pgx.QueryExecModeExec, key, grant)
				})
			}
		},
	})
	return p, err
}

// registerPermit records a new permit, unless the Backend is closed.
func (b *Backend) registerPermit(p *permit) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.life.Closed() {
		return false
	}
	if b.permits == nil {
		b.permits = map[*permit]struct{}{}
	}
	b.permits[p] = struct{}{}
	return true
}

// forgetPermit removes an ended permit.
func (b *Backend) forgetPermit(p *permit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.permits, p)
}

// Permits implements driver.Semaphores: one statement that reads the
// semaphore's row, its live permits and its live waiters. The limit is
// the stored one while a permit is live or awaited, else 0. It reads a
// schema of an earlier version, without permits, as a semaphore that
// has none, and changes nothing.
func (b *Backend) Permits(ctx context.Context, key string) (driver.PermitState, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.PermitState{}, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return driver.PermitState{}, err
	}
	sql, err := b.schema.find(ctx, b.pool, "distlock_semaphore", "distlock_permit", "distlock_permit_waiter")
	if sql == nil {
		return driver.PermitState{}, err // nil, nil: no permit was ever asked
	}
	rows, err := b.pool.Query(ctx, sql.permits, pgx.QueryExecModeExec, key)
	if err != nil {
		return driver.PermitState{}, sortErr("permits", err)
	}
	defer rows.Close()
	var st driver.PermitState
	var limit int32
	for rows.Next() {
		var (
			waiting          int64
			token            pgtype.Int8
			slot             pgtype.Int4
			owner            pgtype.Text
			since, expiresAt pgtype.Timestamptz
		)
		if err := rows.Scan(&limit, &waiting, &token, &slot, &owner, &since, &expiresAt); err != nil {
			return driver.PermitState{}, sortErr("permits", err)
		}
		st.Waiting = int(waiting)
		if !token.Valid {
			continue
		}
		h := driver.Holder{Key: key, Token: uint64(token.Int64), Owner: owner.String, Since: since.Time, Expires: expiresAt.Time}
		if slot.Valid {
			h.Slot, h.HasSlot = int(slot.Int32), true
		}
		st.Holders = append(st.Holders, h)
	}
	if err := rows.Err(); err != nil {
		return driver.PermitState{}, sortErr("permits", err)
	}
	if len(st.Holders) > 0 || st.Waiting > 0 {
		st.Limit = int(limit)
	}
	return st, nil
}

// permit is one permit of a semaphore: the row of distlock_permit that
// grant names.
type permit struct {
	b      *Backend
	key    string
	grant  string // the unguessable id every refresh and release names
	token  uint64
	slot   int // -1 for a permit asked without Slots
	onLost func(error)

	// mu guards the fields below, and is held across each statement, so
	// that a permit's Refresh and Release run one at a time.
	mu       sync.Mutex
	validity driver.Validity
	end      error // why the permit ended; nil while it may be held
}

func (p *permit) Token() uint64 { return p.token }

// Slot implements driver.SlotLease: -1 for a permit asked without
// Semaphore.Slots (the Client asks it only of those asked with it).
func (p *permit) Slot() int { return p.slot }

// Validity implements driver.Lease: the TTL, in whole milliseconds, from
// before the statement that granted or last refreshed the permit was
// sent; the server's expiry is no earlier.
func (p *permit) Validity() driver.Validity {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.validity
}

// Refresh implements driver.Lease: one statement that extends the permit
// to ttl from the server's clock if it has not expired. Otherwise the
// permit is over, and Refresh returns an error matching
// driver.ErrLockLost. A failure to reach the server changes nothing here
// (the error matches driver.ErrUnavailable).
func (p *permit) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := checkRefresh(ctx, ttl); err != nil {
		return driver.Validity{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		return driver.Validity{}, p.end
	}
	ms, v := ttlMillis(ttl)
	conn, err := p.b.pool.Acquire(ctx) // before sent, as for the grant
	if err != nil {
		return driver.Validity{}, sortErr("refresh permit", err)
	}
	defer conn.Release()
	sent := time.Now()
	var ok bool
	if err := conn.QueryRow(ctx, p.b.schema.sql.permitRefresh, pgx.QueryExecModeExec, p.key, p.grant, ms).Scan(&ok); err != nil {
		return driver.Validity{}, sortErr("refresh permit", err)
	}
	if !ok {
		return driver.Validity{}, p.endLocked(p.lostErr("it had expired, or was revoked"))
	}
	p.validity = driver.Validity{Sent: sent, TTL: v}
	return p.validity, nil
}

// Release implements driver.Lease: one statement that gives the permit
// back if it has not expired, and wakes the first waiter. If the permit
// had ended, Release returns an error matching driver.ErrLockLost. If the
// server cannot be reached the error matches driver.ErrUnavailable, and
// the permit is given up all the same: it ends when it expires.
func (p *permit) Release(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		if p.end == errReleased {
			return fmt.Errorf("%w: pglock: permit of %q (token %d) was released", driver.ErrLockLost, p.key, p.token)
		}
		return p.end
	}
	released, err := p.releaseStatement(ctx)
	switch {
	case err != nil:
		p.endLocked(p.lostErr("its release did not reach the server, and it ends when it expires"))
		return sortErr("release permit", err)
	case !released:
		return p.endLocked(p.lostErr("it had expired, or was revoked"))
	}
	p.endLocked(errReleased)
	return nil
}

// releaseStatement sends the release; callers hold p.mu unless the permit
// was never handed out or has ended.
func (p *permit) releaseStatement(ctx context.Context) (bool, error) {
	var released bool
	err := p.b.pool.QueryRow(ctx, p.b.schema.sql.permitRelease, pgx.QueryExecModeExec, p.key, p.grant).Scan(&released)
	return released, err
}

// lostErr is the error of a permit found to be over.
func (p *permit) lostErr(why string) error {
	return fmt.Errorf("%w: pglock: permit of %q (token %d): %s", driver.ErrLockLost, p.key, p.token, why)
}

// endLocked ends the permit with err and returns err.
func (p *permit) endLocked(err error) error {
	if p.end == nil {
		p.end = err
		p.b.forgetPermit(p)
	}
	return err
}

// closePermit gives the permit up as the Backend closes, telling its
// holder before the row is deleted: once it is, a waiter may be granted
// the permit.
func (p *permit) closePermit(ctx context.Context) {
	p.mu.Lock()
	if p.end != nil {
		p.mu.Unlock()
		return
	}
	err := p.endLocked(p.lostErr("the Backend was closed"))
	p.mu.Unlock()
	if p.onLost != nil {
		p.onLost(err)
	}
	_, _ = p.releaseStatement(ctx)
}
