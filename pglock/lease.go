package pglock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
)

// lease is one grant: a session advisory lock held by conn.
type lease struct {
	b      *Backend
	key    string
	token  uint64
	pid    int32 // the session's pid on the server (pg_backend_pid), for SetOwner
	onLost func(error)
	turn   *writerTurn // the key's turn in the Backend's queue, passed on when the grant ends; nil for a shared grant
	shared bool        // a shared grant (AcquireShared)

	// mu guards the fields below and every use of conn: the watcher reads
	// from conn until it is stopped, and nothing else may use conn
	// meanwhile.
	mu   sync.Mutex
	conn *pgxpool.Conn // nil once the grant has ended
	w    *watch        // the running watcher, nil when stopped
	end  error         // why the grant ended, once conn is nil
}

var unbounded = driver.Validity{} // TTL 0: no time bound

func (l *lease) Token() uint64 { return l.token }

// Validity implements driver.Lease: TTL 0, the grant lasts until released
// or lost.
func (l *lease) Validity() driver.Validity { return unbounded }

// watch reads from an idle holding connection, where nothing is expected:
// what comes is the server's notice that it ends the session (a FATAL
// error, then the end of the stream), or a read error when the network
// breaks. Either way the server has released, or will release, the lock.
type watch struct {
	done     chan struct{} // closed when the read ended; err is set then
	err      error
	stopping atomic.Bool // the read was interrupted on purpose
}

// watchLocked starts the watcher of l's connection.
func (l *lease) watchLocked() {
	pg := l.conn.Conn().PgConn()
	w := &watch{done: make(chan struct{})}
	l.w = w
	// Also after Shut: a Refresh may restart the watcher of a lease that
	// Close has yet to end, and Close ends every lease before it waits.
	l.b.life.GoAlways(func() {
		var err error
		for err == nil {
			// With context.Background, pgconn arms no context watcher of
			// its own: only stopWatchLocked's read deadline interrupts it.
			err = pg.WaitForNotification(context.Background())
		}
		w.err = err
		close(w.done)
		if !w.stopping.Load() {
			l.lose(err)
		}
	})
}

// stopWatchLocked interrupts the watcher with a read deadline and waits for
// it. It returns nil if the connection is still usable, and otherwise the
// error that ended the watch.
func (l *lease) stopWatchLocked() error {
	w := l.w
	if w == nil {
		return nil
	}
	l.w = nil
	pg := l.conn.Conn().PgConn()
	w.stopping.Store(true)
	nc := pg.Conn()
	_ = nc.SetReadDeadline(time.Now())
	<-w.done
	_ = nc.SetReadDeadline(time.Time{})
	var ne net.Error
	if errors.As(w.err, &ne) && ne.Timeout() && !pg.IsClosed() {
		return nil
	}
	return w.err
}

// lose ends the grant because its connection broke or the Backend closed.
func (l *lease) lose(cause error) {
	l.mu.Lock()
	lost := l.detachLocked(cause)
	l.mu.Unlock()
	if lost != nil {
		lost.finish()
	}
}

// loss is a grant found lost: detached from its lease under the lease's
// mutex, and finished after that is unlocked, because OnLost may call back
// into the lease or into the Client, which may call the lease.
type loss struct {
	l    *lease
	conn *pgxpool.Conn
	err  error
}

// detachLocked marks the grant lost and takes its connection, if the grant
// has not ended; the caller unlocks l.mu and then calls finish. Calls on
// the lease meanwhile see the grant ended.
func (l *lease) detachLocked(cause error) *loss {
	if l.conn == nil {
		return nil
	}
	l.end = fmt.Errorf("%w: pglock: %q (token %d): %s", driver.ErrLockLost, l.key, l.token, lossReason(cause))
	_ = l.stopWatchLocked()
	conn := l.conn
	l.conn = nil
	return &loss{l: l, conn: conn, err: l.end}
}

// finish tells the holder (OnLost), then closes the connection, which
// releases the lock if the server still holds it, and passes the key's
// turn on. It returns the error of the loss.
func (s *loss) finish() error {
	l := s.l
	if l.onLost != nil {
		l.onLost(s.err)
	}
	l.b.discard(s.conn)
	l.b.forget(l)
	l.turn.Done()
	return s.err
}

// endLocked drops the connection and passes the key's turn on.
func (l *lease) endLocked() {
	l.conn = nil
	l.b.forget(l)
	l.turn.Done()
}

// lossReason describes why a connection that held a lock is gone.
func lossReason(cause error) string {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(cause, ErrClosed):
		return "the Backend was closed"
	case errors.As(cause, &pgErr):
		return fmt.Sprintf("the server ended the session that held the lock (%s, SQLSTATE %s)", pgErr.Message, pgErr.Code)
	}
	return fmt.Sprintf("the connection that held the lock broke (%v)", cause)
}

// endedLocked is the error of a call on a grant that has ended.
func (l *lease) endedLocked() error {
	if l.end != nil {
		return l.end
	}
	return fmt.Errorf("%w: pglock: %q (token %d) was released", driver.ErrLockLost, l.key, l.token)
}

// heldSQL checks that this session holds the advisory lock of $1. pg_locks
// shows a bigint advisory lock as classid (the high 32 bits), objid (the
// low 32 bits) and objsubid 1.
const heldSQL = `SELECT EXISTS (
	SELECT 1 FROM pg_catalog.pg_locks
	WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND granted
		AND mode OPERATOR(pg_catalog.=) 'ExclusiveLock' AND objsubid OPERATOR(pg_catalog.=) 1::pg_catalog.int2
		AND database OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
		AND ((classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) objid::pg_catalog.int8)
			OPERATOR(pg_catalog.=) pg_catalog.hashtextextended($1::pg_catalog.text, 0::pg_catalog.int8))`

// Refresh implements driver.Lease. It checks that the connection is alive
// and that the server still holds the lock on it; there is no TTL to
// extend, and the Validity it returns has TTL 0. A check that fails for any
// reason, ctx included, ends the grant: a connection that cannot be
// confirmed may be one the server is about to drop, and closing it keeps
// the holder from going on after the server has released the lock.
func (l *lease) Refresh(ctx context.Context, ttl time.Duration) (driver.Validity, error) {
	if err := driver.CheckTTL(ttl); err != nil {
		return driver.Validity{}, err
	}
	if err := ctx.Err(); err != nil {
		return driver.Validity{}, fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
	}
	l.mu.Lock()
	if l.conn == nil {
		defer l.mu.Unlock()
		return driver.Validity{}, l.endedLocked()
	}
	cause := l.checkLocked(ctx)
	if cause == nil {
		l.watchLocked()
		l.mu.Unlock()
		return unbounded, nil
	}
	lost := l.detachLocked(cause)
	l.mu.Unlock()
	return driver.Validity{}, lost.finish()
}

// checkLocked stops the watcher and asks the server whether this session
// still holds the lock; it returns why not, or nil.
func (l *lease) checkLocked(ctx context.Context) error {
	if err := l.stopWatchLocked(); err != nil {
		return err
	}
	var held bool
	query := heldSQL
	if l.shared {
		query = heldSharedSQL
	}
	if err := l.conn.QueryRow(ctx, query, l.key).Scan(&held); err != nil {
		return fmt.Errorf("refresh: %w", err)
	}
	if !held {
		return errors.New("the server no longer holds it on this session")
	}
	return nil
}

// releaseSQL marks the grant released and unlocks the key's lock in one
// statement, one round trip and one transaction. Its conditions, checked
// before the row is changed, first take the same lock at transaction level
// (the session holds it, so that is granted at once; pg_try_ so that a
// session that lost it does not wait) and have the transaction committed
// without waiting for its WAL flush; its RETURNING, computed once the row
// is changed, then gives up the session-level hold. The transaction-level
// one keeps the lock until the transaction has committed, and so the next
// holder, woken only then, always finds the grant marked released (see
// distlock_acquire in schema.sql) with the one UPDATE of its common case,
// instead of racing the commit and taking the slow path (a row lock wait
// for the commit, then two more statements). The mark lost in a crash
// only makes the next grant wait the loss grace. A plain UPDATE costs the
// server less than a WITH that joins the unlock to the mark. It returns no row when the key's row does not name this grant (a
// lease-mode grant of the key took a token since) or the lock is held by
// another session: unlockSQL then unlocks without the mark. The release
// of a watched key is notified (see watch.go) as it commits: RETURNING
// reads the watchers' mark in the row's latest version.
const releaseSQL = `UPDATE @schema@.distlock_fence SET held = false
WHERE key OPERATOR(pg_catalog.=) $1::pg_catalog.text AND token OPERATOR(pg_catalog.=) $2::pg_catalog.int8
	AND pg_catalog.pg_try_advisory_xact_lock(pg_catalog.hashtextextended($1::pg_catalog.text, 0::pg_catalog.int8))
	AND pg_catalog.set_config('synchronous_commit', 'off', true) IS NOT NULL
RETURNING pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended($1::pg_catalog.text, 0::pg_catalog.int8))
	AND ` + notifyWatched

// unlockSQL gives up the key's lock without marking the grant released:
// for a release whose row does not name it. It reports false if the
// session did not hold the lock.
const unlockSQL = `SELECT pg_catalog.pg_advisory_unlock(pg_catalog.hashtextextended($1::pg_catalog.text, 0::pg_catalog.int8))`

// Release implements driver.Lease: pg_advisory_unlock on the holding
// connection, which then goes back to the pool. The grant is marked
// released in the same statement, so the next grant of the key does not
// wait for WithLossGrace. If the grant was lost it
// returns an error matching distlock.ErrLockLost. If the unlock fails
// (ctx ends, the network breaks) the connection is closed instead, which
// the server treats as an unlock of everything the session held, and
// Release returns nil: the key is given up either way.
func (l *lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.conn == nil {
		defer l.mu.Unlock()
		return l.endedLocked()
	}
	cause := l.unlockLocked(ctx)
	if cause == nil {
		l.mu.Unlock()
		return nil
	}
	lost := l.detachLocked(cause)
	l.mu.Unlock()
	return lost.finish()
}

// unlockLocked runs the release statement and ends the grant, or returns
// why the grant is to be taken for lost, leaving it to the caller.
func (l *lease) unlockLocked(ctx context.Context) error {
	if err := l.stopWatchLocked(); err != nil {
		return err
	}
	var unlocked bool
	var err error
	if l.shared {
		err = l.conn.QueryRow(ctx, l.b.schema.sql.releaseShared, l.key, int64(l.token)).Scan(&unlocked)
	} else {
		err = l.conn.QueryRow(ctx, l.b.schema.sql.release, l.key, int64(l.token)).Scan(&unlocked)
	}
	if errors.Is(err, pgx.ErrNoRows) && !l.shared {
		err = l.conn.QueryRow(ctx, unlockSQL, l.key).Scan(&unlocked)
	}
	if err != nil {
		if ctx.Err() == nil && l.conn.Conn().IsClosed() {
			return err // the server may have ended the session first
		}
		l.b.discard(l.conn)
		l.endLocked()
		return nil
	}
	if !unlocked {
		return errors.New("the server did not hold it on this session")
	}
	l.conn.Release()
	l.endLocked()
	return nil
}
