package pglock

// The holder of one key, watched: LISTEN distlock_holder, and the
// watchers' mark on the key's row, which has the server notify every
// change of the key's holder (see version 5 in schema.sql).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock/driver"
)

// holderChannel is the LISTEN/NOTIFY channel of changes of holder: the
// payload is the key.
const holderChannel = "distlock_holder"

// notifyWatched, in the RETURNING of a statement that changes the row of
// the key $1 in distlock_fence or distlock_lease, notifies the key's
// watchers if the row is marked watched. It is true. RETURNING sees the
// row's latest version, which the statement waited for if a watcher's
// mark was in progress.
const notifyWatched = `CASE WHEN watched_until OPERATOR(pg_catalog.>) pg_catalog.now()
	THEN pg_catalog.pg_notify('` + holderChannel + `', $1::pg_catalog.text)::pg_catalog.text IS NOT NULL ELSE true END`

// The watchers' mark: the key's row is marked watched until $2 ms from
// now, or later if it was already. A key never granted gets its row: in
// distlock_fence with a token that no grant had (the first grant takes
// the next), in distlock_lease released. The mark is committed without
// waiting for its WAL flush: one lost in a crash ends with the server's
// sessions, and every watch with them.
const (
	markSQL = `INSERT INTO @schema@.distlock_fence AS f (key, token, watched_until)
SELECT $1::pg_catalog.text, 1::pg_catalog.int8, ` + markUntil + `
WHERE pg_catalog.set_config('synchronous_commit', 'off', true) IS NOT NULL
ON CONFLICT (key) DO UPDATE SET watched_until = GREATEST(f.watched_until, EXCLUDED.watched_until)`

	rowMarkSQL = `INSERT INTO @schema@.distlock_lease AS l (key, grant_id, expires, watched_until)
SELECT $1::pg_catalog.text, NULL::pg_catalog.text, '-infinity'::pg_catalog.timestamptz, ` + markUntil + `
WHERE pg_catalog.set_config('synchronous_commit', 'off', true) IS NOT NULL
ON CONFLICT (key) DO UPDATE SET watched_until = GREATEST(l.watched_until, EXCLUDED.watched_until)`

	markUntil = `pg_catalog.now() OPERATOR(pg_catalog.+) ($2::pg_catalog.float8 OPERATOR(pg_catalog.*) '1 millisecond'::pg_catalog.interval)`
)

// pidSQL reads the pid of the session that holds the advisory lock of the
// key $1 in SessionMode, 0 when none does.
var pidSQL = `SELECT coalesce((SELECT l.pid FROM pg_catalog.pg_locks l WHERE ` +
	strings.ReplaceAll(heldLockSQL, "f.key", "$1::pg_catalog.text") + ` LIMIT 1), 0)`

// markLife is how long a watchers' mark lasts unless renewed, which a
// watch does every third of it.
const markLife = 30 * time.Second

// watchPoll is how often a SessionMode watch asks the server which
// session holds the key's lock, for the one change it is not told of: a
// session that ended without releasing, whose lock the server frees
// silently. It is distlock.WatchPoll, a Client's poll when it cannot
// watch; a variable for tests.
var watchPoll = time.Second

// WatchHolder implements driver.HolderWatcher with LISTEN distlock_holder
// on the Backend's LISTEN session (WithListen in LeaseMode; in SessionMode
// a connection made as the pool makes its own, opened by the first
// WatchHolder), shared by its watches and LeaseMode waiters, and a mark
// on the key's row, which has every grant, release and SetOwner of the
// key notified in its own transaction. It returns once LISTEN is in
// effect (waiting for the session at most driver.ConfirmWait) and the
// mark is committed, so that no later change is missed; the mark is
// renewed every 10s. The watch ends when the LISTEN session breaks (what
// was notified meanwhile is lost; a session silent for 5s is pinged, and
// ended when the ping gets no answer within the request timeout), when a renewal fails, when ctx ends or
// when the Backend is closed. What is not notified: a LeaseMode grant that
// expires (the watcher reads again at its Expires) and, in SessionMode, a
// session that ended without releasing, whose lock the server frees
// silently; a SessionMode watch asks every second which session holds the
// key's lock, and wakes the watcher when that changed.
//
// A LeaseMode Backend without WithListen cannot watch (its pool may be a
// pooler in transaction mode, where LISTEN does not work): WatchHolder
// returns an error matching errors.ErrUnsupported, and a Client's Watch
// polls. So it does for a role that may not mark the key's row (INSERT
// and UPDATE on distlock_fence in SessionMode, on distlock_lease in
// LeaseMode), for a SessionMode Backend whose pool has a BeforeConnect
// or AfterConnect hook (the LISTEN connection would not run it), and for
// a schema whose functions an earlier version's
// Migrate put back, which notify no watcher: a watch checks them when it
// begins and at each renewal of its mark, and ends if they are.
func (b *Backend) WatchHolder(ctx context.Context, key string) (<-chan struct{}, error) {
	if err := driver.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := b.life.CheckOpen(); err != nil {
		return nil, err
	}
	if b.listen == nil {
		if b.cfg.mode == SessionMode {
			return nil, fmt.Errorf("pglock: watch holder: the pool has a BeforeConnect or AfterConnect hook, which a LISTEN connection would not run: %w", errors.ErrUnsupported)
		}
		return nil, fmt.Errorf("pglock: watch holder: a LeaseMode Backend without WithListen has no LISTEN session: %w", errors.ErrUnsupported)
	}
	if b.listen.start() && !b.life.Go(func() { b.listen.run(b.ctx, b.cfg.requestTimeout) }) {
		return nil, ErrClosed
	}
	// wctx ends with ctx or at Close.
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.ctx, cancel)
	started := false
	defer func() {
		if !started {
			stop()
			cancel()
		}
	}()
	ended := func() error {
		if ctx.Err() == nil && b.ctx.Err() != nil {
			return ErrClosed
		}
		return ctx.Err()
	}
	lctx, lcancel := context.WithTimeout(wctx, driver.ConfirmWait)
	sub, live := b.listen.watch(lctx, key)
	lcancel()
	if !live {
		if wctx.Err() != nil {
			return nil, ended()
		}
		return nil, fmt.Errorf("%w: pglock: watch holder: no LISTEN session within %v", driver.ErrUnavailable, driver.ConfirmWait)
	}
	defer func() {
		if !started {
			sub.cancel()
		}
	}()
	sql, err := b.schema.ensure(wctx, b.pool)
	if err != nil {
		if wctx.Err() != nil {
			return nil, ended()
		}
		return nil, watchErr(err)
	}
	mark, poll := sql.mark, b.cfg.mode == SessionMode
	if b.cfg.mode == LeaseMode {
		mark = sql.rowMark
	}
	if _, err := b.pool.Exec(wctx, mark, pgx.QueryExecModeExec, key, markLife.Milliseconds()); err != nil {
		if wctx.Err() != nil {
			return nil, ended()
		}
		return nil, watchErr(err)
	}
	if err := b.notifies(wctx); err != nil {
		if wctx.Err() != nil {
			return nil, ended()
		}
		return nil, err
	}
	var pid int32
	if poll {
		if err := b.pool.QueryRow(wctx, pidSQL, pgx.QueryExecModeExec, key).Scan(&pid); err != nil {
			if wctx.Err() != nil {
				return nil, ended()
			}
			return nil, watchErr(err)
		}
	}
	out := make(chan struct{}, 1)
	wake := func() {
		select {
		case out <- struct{}{}:
		default: // one is pending already
		}
	}
	w := &holderWatch{b: b, key: key, sub: sub, mark: mark, poll: poll, pid: pid, wake: wake}
	started = b.life.Go(func() {
		defer close(out)
		defer stop()
		defer cancel()
		defer sub.cancel()
		w.run(wctx)
	})
	if !started {
		return nil, ErrClosed
	}
	return out, nil
}

// holderWatch is one watch's goroutine.
type holderWatch struct {
	b    *Backend
	key  string
	sub  *holderSub
	mark string // the mark's statement
	poll bool   // SessionMode: ask for the lock's session every watchPoll
	pid  int32  // the session that held the lock at the last poll, 0 for none
	wake func()
}

// run passes notifications on, renews the mark and polls, until ctx ends,
// the listener stops being live, or a renewal or a poll fails.
func (w *holderWatch) run(ctx context.Context) {
	renew := time.NewTicker(markLife / 3)
	defer renew.Stop()
	var tick <-chan time.Time
	if w.poll {
		t := time.NewTicker(watchPoll)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.sub.lost:
			return // notifications may have been lost: the watcher reads and watches again
		case <-w.sub.c:
			w.wake()
		case <-renew.C:
			rctx, cancel := context.WithTimeout(ctx, w.b.cfg.requestTimeout)
			_, err := w.b.pool.Exec(rctx, w.mark, pgx.QueryExecModeExec, w.key, markLife.Milliseconds())
			if err == nil {
				err = w.b.notifies(rctx)
			}
			cancel()
			if err != nil {
				return // the mark may lapse, or changes are no longer notified
			}
		case <-tick:
			rctx, cancel := context.WithTimeout(ctx, w.b.cfg.requestTimeout)
			var pid int32
			err := w.b.pool.QueryRow(rctx, pidSQL, pgx.QueryExecModeExec, w.key).Scan(&pid)
			cancel()
			if err != nil {
				return
			}
			if pid != w.pid {
				w.pid = pid
				w.wake()
			}
		}
	}
}

// watchErr sorts the error of a watch's statement: a role that may not
// mark the key's row cannot watch (errors.ErrUnsupported: the caller
// polls).
func watchErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
		return fmt.Errorf("pglock: watch holder: the role may not mark the key's row (%s): %w", pgErr.Message, errors.ErrUnsupported)
	}
	return sortErr("watch holder", err)
}

// notifies checks that the schema's functions notify the watchers of a
// key: an earlier version's Migrate, run while this version's Backends
// run (a rolling upgrade), puts back functions that do not, and a watch
// would wait for a notification that never comes. It returns an error
// matching errors.ErrUnsupported if they do not, so that a Client's Watch
// polls; Migrate of this version brings them back.
func (b *Backend) notifies(ctx context.Context) error {
	f, err := locate(ctx, b.pool)
	switch {
	case err != nil:
		return watchErr(err)
	case f.missing || f.outdated:
		return fmt.Errorf("pglock: watch holder: the schema's functions are of an earlier version, which notifies no watcher (see Migrate): %w", errors.ErrUnsupported)
	}
	return nil
}
