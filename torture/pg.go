package torture

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// pgURL is the postgres:// URL of the server at addr (testserver's: user
// postgres, trust authentication), with session settings ("name=value&...",
// sent by pgx when it connects) added.
func pgURL(addr, session string) string {
	u := "postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=5"
	if session != "" {
		u += "&" + session
	}
	return u
}

// openPG opens a worker's pglock Backend (session mode).
func openPG(ctx context.Context, r request) (driver.Backend, io.Closer, error) {
	b, err := pglock.OpenURL(ctx, r.URL)
	if err != nil {
		return nil, nil, err
	}
	return b, b, nil
}

// holdsWhilePaused reports whether a stopped holder keeps its lock for as
// long as it lives: flock, and a PostgreSQL session, which the server ends
// only when the connection does (or when it has been idle for
// idle_session_timeout, if set). PGSession is also set for pglock's lease
// mode, whose grants expire.
func (tg Target) holdsWhilePaused() bool {
	return tg.Kind == backendFile || tg.Kind == backendPG && tg.PGSession == ""
}

// Modes returns the store modes a backend kind runs in: unfenced and
// fenced by fence.Register, and on PostgreSQL also the store kept in
// PostgreSQL and fenced by pglock.Fence.
func Modes(kind string) []Mode {
	if kind == backendPG {
		return []Mode{Unfenced, Fenced, PGFenced}
	}
	return []Mode{Unfenced, Fenced}
}

// pgIdleTimeout is the idle_session_timeout of the pause/idle-timeout row:
// well above the Client's refresh interval (TTL/3), so a live holder's
// session is never idle that long, and short enough for a round.
const pgIdleTimeout = 3 * time.Second

// The PostgreSQL rows.
func init() {
	addRow("pause", backendPG, ExpectNothing, "a session lock has no TTL: the server keeps it while the holder's connection is open, and a stopped process's connection stays open, so nobody else is granted during the pause (safe, but it blocks); see pause/idle-timeout", nil)
	addRow("delay", backendPG, ExpectBite, "", nil)
	addRow("holder-kill", backendPG, ExpectHold, "the kernel closes the killed holder's connection, and the server ends its session and frees the lock", nil)
	addRow("server-kill/fsync", backendPG, ExpectHold,
		"fsync=on; the kill takes the postmaster and every backend (as an immediate shutdown does) and the restart recovers from the WAL; it cannot bite here: the lock goes with the holder's session, whose broken connection the holder sees, and the tokens are committed",
		pgServerKillScenario("fsync=on"))
	addRow("server-kill/no-fsync", backendPG, ExpectHold,
		"fsync=off: a commit is written to the kernel, not to disk, which survives a killed server (only a crash of the machine loses it, which the harness does not cause); see server-kill/async-commit for acknowledged commits that a kill loses",
		pgServerKillScenario())
	notRow("partition", backendPG, "a session cut off keeps its lock until the server's TCP keepalive or tcp_user_timeout ends it (hours by default): nobody else is granted; connection-kill is the server ending the session")
	notRow("leader-kill", backendPG, "one server: see server-kill")
	notRow("failover/missed-1", backendPG, "advisory locks are not replicated: a standby knows none, and a failover ends every session")
	notRow("failover/missed-2", backendPG, "see failover/missed-1")
	notRow("late-release/naive", backendPG, "a session lock has no TTL: a paused holder keeps it")
	notRow("late-release/owner-checked", backendPG, "a session lock has no TTL: a paused holder keeps it")
	notRow("lost-reply/naive", backendPG, "no naive PostgreSQL lock built")
	notRow("lost-reply/distlock", backendPG, "not run on PostgreSQL yet")
	notRow("lost-reply/distlock-no-retry", backendPG, "not run on PostgreSQL yet")
	others := func(why string) map[string]string {
		return map[string]string{backendRedis: why, backendEtcd: why, backendFile: why, backendZK: why}
	}
	Scenarios = append(Scenarios,
		Scenario{
			Name: "pause", Variant: "idle-timeout",
			Title:  "as pause, with the server's idle_session_timeout (3s) on the workers' sessions: the server ends the stopped holder's session and frees its lock",
			Expect: map[string]Expect{backendPG: ExpectBite},
			Why:    others("a PostgreSQL setting"),
			Run: func(f *Fixture) error {
				// A server setting goes in libpq's options, a space written %20.
				f.Target.PGSession = fmt.Sprintf("options=-c%%20idle_session_timeout%%3D%d", pgIdleTimeout.Milliseconds())
				return pauseScenario(f)
			},
		},
		Scenario{
			Name: "connection-kill", Variant: "between-check-and-write",
			Title:  "the holder's session ended by pg_terminate_backend after the holder checked its lock and before its write; the next holder is granted and writes; then the old write goes out",
			Expect: map[string]Expect{backendPG: ExpectBite},
			Why:    others("a PostgreSQL fault: see partition and session-expiry"),
			Run:    connectionKillScenario(false),
		},
		Scenario{
			Name: "connection-kill", Variant: "checked",
			Title:  "the holder's session ended by pg_terminate_backend while the holder writes, checking its lock before each write; its context must end before the next grant",
			Expect: map[string]Expect{backendPG: ExpectHold},
			Why: mergeWhy(others("a PostgreSQL fault: see partition and session-expiry"),
				backendPG, "the server tells the session it ends it, pglock cancels the lock's context on that notice, and the next grant of a lost key waits pglock's loss grace (1s) in the server first"),
			Run: connectionKillScenario(true),
		},
		Scenario{
			Name: "server-kill", Variant: "async-commit", Own: true,
			Title:  "PostgreSQL killed with SIGKILL (postmaster and backends) just after a grant, with synchronous_commit=off and a 10s WAL writer delay, where a commit is acknowledged before it reaches the WAL: pglock's acquire raises synchronous_commit to on for its own transaction, so the token increment must survive",
			Expect: map[string]Expect{backendPG: ExpectHold},
			Why: mergeWhy(others("a PostgreSQL setting"),
				backendPG, "without pglock's own synchronous_commit=on the baseline bites: every token increment since the last WAL flush is lost and the restarted server grants token 1 again"),
			Run: pgServerKillScenario("synchronous_commit=off", "wal_writer_delay=10000"),
		},
	)
	Scenarios = append(Scenarios, pgLeaseRows(others)...)
	findings["pause/idle-timeout"] = "With idle_session_timeout a PostgreSQL session lock becomes a lease: the server ends the stopped holder's session, frees its lock and the waiter is granted (after pglock's loss grace); the holder wakes and writes with its old token. Only a fenced store (fence.Register, or pglock.Fence in the writing transaction) refuses it. A session grant has no local deadline, so the woken holder's lock looks live until its connection watcher has read the server's notice: in one of five rounds of the full run the holder proved its lock live a few milliseconds after the waiter's grant (a proven overlap)."
	findings["connection-kill/between-check-and-write"] = "pg_terminate_backend frees the lock at once; the holder is told (the server's notice cancels its context), but a write it had already decided to make goes out after the next holder's: a check before a write cannot close that window, a fence in the storage does."
	findings["connection-kill/checked"] = "A holder that checks before each write never writes after its session was ended: pglock acts on the server's notice, and the next grant of a lost key waits the loss grace in the server first."
	findings["pause/lease"] = "In lease mode a PostgreSQL lock is a lease like Redis's: the stopped holder's row expires by the server's clock, the waiter is granted when it expires, and the holder wakes and writes with its old token (its Client's deadline has passed, and its release reports the lock lost). Only a fenced store refuses the write."
	findings["delay/lease"] = "As on every backend: a write already sent is not recalled by the lock; the release notifies the waiter, which is granted and writes before the delayed write lands. Only a fenced store refuses it."
	findings["connection-kill/lease"] = "Ending every session of the holder and of the waiter ends no lease-mode grant: the holder's next refreshes go through new pool connections and its lock stays live while it works, and the waiter's LISTEN session reconnects, so the waiter is granted after the release and not before."
	findings["server-kill/lease"] = "The grant's row and its token survive a kill of a server that acknowledges commits before their WAL is flushed: pglock's lease acquire and refresh raise synchronous_commit to on for their own transaction (with that removed, the restarted server granted the waiter token 1 at once while the holder, token 5, went on writing: an overlap and a token regression). The holder's 6s lease outlives the restart, and the waiter is granted after its release."
	findings["server-kill/async-commit"] = "synchronous_commit=off acknowledges a commit before its WAL record is flushed, and a kill loses it (with this check removed from distlock_acquire the restarted server granted token 1 after token 5). pglock's acquire raises synchronous_commit to on for its own transaction, so tokens survive; writes of other transactions may still be lost."
}

// mergeWhy sets m[kind] to why and returns m.
func mergeWhy(m map[string]string, kind, why string) map[string]string {
	m[kind] = why
	return m
}

// pgTerminateHolder ends the session that holds key's advisory lock on srv
// and waits until it has ended; it returns how many sessions it ended.
func pgTerminateHolder(srv *testserver.Postgres, key string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN)
	if err != nil {
		return 0, fmt.Errorf("torture: %w", err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND ((classid::int8 << 32) | objid::int8) = hashtextextended($1, 0)`, key).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("torture: pg_terminate_backend: %w", err)
	}
	return n, nil
}

// connectionKillScenario terminates A's holding session. Unchecked, A has
// checked its lock and is about to write (it waits for Go between its read
// and its write, as a holder slowed there would): its write goes out after
// the next holder's. Checked, A goes on writing and checks before each
// write: pglock learns of the termination from the server's notice, and the
// next grant waits the loss grace, so A's context ends first.
func connectionKillScenario(checked bool) func(f *Fixture) error {
	return func(f *Fixture) error {
		r := f.Run
		ws := f.Workers(map[string]WorkerConfig{"A": {}, "B": {}})
		a, b := ws["A"], ws["B"]
		for round := range f.rounds() {
			ta, err := f.warmThenHold(a, b)
			if err != nil {
				return err
			}
			bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
			var ac <-chan RMWResult
			if !checked {
				ac = a.RMWAsync(f.Res, RMWOptions{Announce: true})
				if _, err := a.Announced(time.Minute); err != nil {
					return err
				}
			}
			n, err := pgTerminateHolder(f.Target.PG, f.Key)
			if err != nil {
				return err
			}
			r.Fault("A", "pg_terminate_backend of the holding session")
			r.MarkFault(a)
			if n != 1 {
				return fmt.Errorf("pg_terminate_backend ended %d sessions holding the key, want 1", n)
			}
			var bres AcquireResult
			if checked {
				var written, refused int
				if bres, written, refused, err = workUntilGranted(a, bc, f.Res); err != nil {
					return err
				}
				r.Notef("round %d: A's session (token %d) terminated: %d increments written before A learned it, %d refused by its own check after; B granted token %d",
					round, ta, written, refused, bres.Token)
			} else {
				var ok bool
				if bres, ok, err = waitGrant(bc, 2*time.Minute); !ok {
					return fmt.Errorf("B not granted after A's session ended: %v", err)
				}
			}
			for range 2 {
				if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
					return res.Err
				}
			}
			if !checked {
				if err := a.Go(); err != nil {
					return err
				}
				ares := <-ac
				if ares.Err != nil {
					return ares.Err
				}
				r.Notef("round %d: A (token %d) checked its lock, its session was terminated, B was granted token %d and wrote; A's write then: %s",
					round, ta, bres.Token, ares.Outcome)
			}
			r.Injected()
			if !r.waitEnded(a, time.Minute) {
				return fmt.Errorf("A's lock context never ended")
			}
			if err := a.Release(); ErrKind(err) != kindLost {
				r.Notef("round %d: A's release after its session ended: %s", round, errKindOrOK(err))
			}
			if err := f.release(b); err != nil {
				return err
			}
		}
		return nil
	}
}

// workUntilGranted has a increment res, checking its lock before each
// write, paced, until bc yields B's grant: it counts the increments written
// and those a's own check refused.
func workUntilGranted(a *Worker, bc <-chan AcquireResult, res string) (AcquireResult, int, int, error) {
	var written, refused int
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case bres := <-bc:
			return bres, written, refused, bres.Err
		default:
		}
		if time.Now().After(deadline) {
			return AcquireResult{}, written, refused, fmt.Errorf("B not granted while A worked")
		}
		out := a.RMW(res, RMWOptions{})
		switch {
		case ErrKind(out.Err) == kindNotLive || out.Outcome == writeSkipped:
			refused++
		case out.Err != nil:
			return AcquireResult{}, written, refused, out.Err
		default:
			written++
		}
		time.Sleep(50 * time.Millisecond) // the workload's pace
	}
}

// pgServerKillScenario starts a PostgreSQL server of its own with settings
// and kills it (the postmaster and every backend: nothing is flushed, as in
// an immediate shutdown) while A holds the lock; after the restart (crash
// recovery) B acquires. A learns of the loss from its broken connection;
// B's token must be above A's unless the server lost acknowledged commits.
func pgServerKillScenario(settings ...string) func(f *Fixture) error {
	return func(f *Fixture) error {
		r := f.Run
		srv := testserver.StartPostgres(f.T, testserver.WithPostgresSettings(settings...))
		f.Target.PG = srv
		shown, err := pgPrepare(srv)
		if err != nil {
			return err
		}
		r.Notef("server: %s", shown)
		ws := f.Workers(map[string]WorkerConfig{"A": {}, "B": {}})
		a, b := ws["A"], ws["B"]
		for round := range f.rounds() {
			ta, err := f.warmThenHold(a, b)
			if err != nil {
				return err
			}
			srv.Kill()
			r.Fault("", "postgres kill -9 (postmaster and backends)")
			r.MarkFault(a)
			srv.Restart(f.T)
			r.Fault("", "postgres restarted (crash recovery)")
			if !r.waitEnded(a, time.Minute) {
				return fmt.Errorf("A's lock context never ended")
			}
			tb, err := b.Acquire(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
			if err != nil {
				return fmt.Errorf("B after the restart: %w", err)
			}
			r.Injected()
			if tb > ta {
				r.Notef("round %d: A held token %d when the server was killed; after the restart B was granted token %d", round, ta, tb)
			} else {
				r.Notef("round %d: A held token %d when the server was killed; after the restart B was granted token %d: the restarted server lost acknowledged token increments", round, ta, tb)
			}
			if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
			if err := f.release(b); err != nil {
				return err
			}
			if err := a.Release(); ErrKind(err) != kindLost {
				r.Notef("round %d: A's release after the restart: %s", round, errKindOrOK(err))
			}
		}
		return nil
	}
}

// pgPrepare creates pglock's schema on srv and checkpoints, so that a
// server that loses its latest commits in a kill still has the schema (the
// scenario is about tokens, not about DDL). It returns the server's
// durability settings, as the server reports them.
func pgPrepare(srv *testserver.Postgres) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, srv.DSN)
	if err != nil {
		return "", fmt.Errorf("torture: %w", err)
	}
	defer pool.Close()
	if err := pglock.Migrate(ctx, pool); err != nil {
		return "", fmt.Errorf("torture: %w", err)
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return "", fmt.Errorf("torture: checkpoint: %w", err)
	}
	var shown string
	err = pool.QueryRow(ctx, `SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ' ' ORDER BY name) FROM pg_settings
		WHERE name IN ('fsync', 'synchronous_commit', 'wal_writer_delay')`).Scan(&shown)
	if err != nil {
		return "", fmt.Errorf("torture: settings: %w", err)
	}
	return shown, nil
}
