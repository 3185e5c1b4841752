package torture

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/testserver"
)

// pgLeaseParams are the URL parameters of pglock's lease mode on srv, with
// LISTEN on a direct session with the same server.
func pgLeaseParams(srv *testserver.Postgres) string {
	return fmt.Sprintf("mode=lease&listen_host=127.0.0.1:%d", srv.Port)
}

// PGLeaseTarget is a Target of kind postgres whose workers' Backends run
// in lease mode on the lock server lock, and whose PGFenced store keeps
// its registers on data.
func PGLeaseTarget(lock, data *testserver.Postgres) Target {
	return Target{Kind: backendPG, PG: lock, Data: data, PGSession: pgLeaseParams(lock)}
}

// inLeaseMode has a scenario run with the workers' Backends in lease mode.
func inLeaseMode(run func(f *Fixture) error) func(f *Fixture) error {
	return func(f *Fixture) error {
		f.Target.PGSession = pgLeaseParams(f.Target.PG)
		return run(f)
	}
}

// pgLeaseRows are the PostgreSQL rows of pglock's lease mode.
func pgLeaseRows(others func(why string) map[string]string) []Scenario {
	return []Scenario{
		{
			Name: "pause", Variant: "lease",
			Title:  "as pause, with pglock in lease mode: the stopped holder's row expires by the server's clock and the waiter is granted",
			Expect: map[string]Expect{backendPG: ExpectBite},
			Why:    others("a PostgreSQL mode: see pause"),
			Run:    inLeaseMode(pauseScenario),
		},
		{
			Name: "delay", Variant: "lease",
			Title:  "as delay, with pglock in lease mode (the release notifies the waiter, which LISTENs on a session of its own)",
			Expect: map[string]Expect{backendPG: ExpectBite},
			Why:    others("a PostgreSQL mode: see delay"),
			Run:    inLeaseMode(delayScenario),
		},
		{
			Name: "connection-kill", Variant: "lease",
			Title:  "every session of the holder and of the waiter (pool connections and LISTEN session) ended by pg_terminate_backend, with pglock in lease mode; the holder goes on writing, checking its lock before each write, for two TTLs, then releases",
			Expect: map[string]Expect{backendPG: ExpectHold},
			Why: mergeWhy(others("a PostgreSQL fault: see partition and session-expiry"),
				backendPG, "a lease-mode grant is a row, not a session: the holder's refreshes go through new connections and the waiter's LISTEN session reconnects, so the waiter is granted after the release and not before"),
			Run: pgLeaseConnectionKillScenario,
		},
		{
			Name: "server-kill", Variant: "lease", Own: true,
			Title:  "PostgreSQL killed with SIGKILL (postmaster and backends) while a lease-mode grant is held, with synchronous_commit=off and a 10s WAL writer delay; after the restart the waiter asks while the holder goes on writing, checking its lock",
			Expect: map[string]Expect{backendPG: ExpectHold},
			Why: mergeWhy(others("a PostgreSQL setting"),
				backendPG, "pglock's lease statements raise synchronous_commit to on for their own transaction: the grant's row and its token survive the crash, and the restarted server grants the waiter only after the holder's release or expiry"),
			Run: pgLeaseServerKillScenario,
		},
	}
}

// pgTerminateApps ends every session on srv whose application_name is one
// of apps, and waits until they have ended; it returns how many it ended
// per name.
func pgTerminateApps(srv *testserver.Postgres, apps ...string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN)
	if err != nil {
		return nil, fmt.Errorf("torture: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT application_name, count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
		WHERE application_name = ANY($1) AND pid <> pg_backend_pid() GROUP BY 1`, apps)
	if err != nil {
		return nil, fmt.Errorf("torture: pg_terminate_backend: %w", err)
	}
	ended := map[string]int{}
	for rows.Next() {
		var app string
		var n int
		if err := rows.Scan(&app, &n); err != nil {
			return nil, fmt.Errorf("torture: pg_terminate_backend: %w", err)
		}
		ended[app] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("torture: pg_terminate_backend: %w", err)
	}
	return ended, nil
}

// workChecked has w increment res, checking its lock before each write,
// paced, for d: it counts the increments written and those w's own check
// refused, and reports whether bc yielded a grant meanwhile (which it
// keeps in *granted, for the caller to wait on no more).
func workChecked(w *Worker, res string, d time.Duration, bc <-chan AcquireResult, granted *AcquireResult) (written, refused int, early bool, err error) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !early {
			select {
			case *granted = <-bc:
				early = true
			default:
			}
		}
		out := w.RMW(res, RMWOptions{})
		switch {
		case ErrKind(out.Err) == kindNotLive || out.Outcome == writeSkipped:
			refused++
		case out.Err != nil:
			return written, refused, early, out.Err
		default:
			written++
		}
		time.Sleep(50 * time.Millisecond) // the workload's pace
	}
	return written, refused, early, nil
}

// grantAfter returns B's grant: the one workChecked saw, or the next from
// bc within d.
func grantAfter(bc <-chan AcquireResult, early bool, got AcquireResult, d time.Duration) (AcquireResult, error) {
	if early {
		return got, got.Err
	}
	res, ok, err := waitGrant(bc, d)
	if !ok {
		return res, fmt.Errorf("B not granted after A's release: %v", err)
	}
	return res, nil
}

// pgLeaseConnectionKillScenario ends every session of the holder A and of
// the waiter B. In lease mode that ends no grant: A's refreshes must go
// through new connections and keep its lock while it works (two TTLs, past
// the deadline its last refresh before the kill gave it), and B, whose
// LISTEN session reconnects, must be granted after A's release and not
// before. Workers are told apart on the server by their application_name.
func pgLeaseConnectionKillScenario(f *Fixture) error {
	r := f.Run
	f.Target.PGSession = pgLeaseParams(f.Target.PG)
	app := func(name string) string { return f.Res + "-" + name } // unique per run, under 64 bytes
	lockURL := func(name string) string { return f.Target.URL() + "&application_name=" + url.QueryEscape(app(name)) }
	ws := f.Workers(map[string]WorkerConfig{"A": {URL: lockURL("A")}, "B": {URL: lockURL("B")}})
	a, b := ws["A"], ws["B"]
	for round := range f.rounds() {
		ta, err := f.warmThenHold(a, b)
		if err != nil {
			return err
		}
		bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
		ended, err := pgTerminateApps(f.Target.PG, app("A"), app("B"))
		if err != nil {
			return err
		}
		r.Fault("A", "pg_terminate_backend of every session of A and B")
		var bres AcquireResult
		written, refused, early, err := workChecked(a, f.Res, 2*f.P.TTL, bc, &bres)
		if err != nil {
			return err
		}
		relErr := a.Release()
		if bres, err = grantAfter(bc, early, bres, time.Minute); err != nil {
			return err
		}
		for range 2 {
			if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
				return res.Err
			}
		}
		if ended[app("A")] > 0 {
			r.Injected()
		}
		when := "after A's release"
		if early {
			when = "while A worked"
		}
		r.Notef("round %d: %d sessions of A (token %d) and %d of B ended; A then wrote %d increments and its own check refused %d; A's release: %s; B granted token %d %s",
			round, ended[app("A")], ta, ended[app("B")], written, refused, errKindOrOK(relErr), bres.Token, when)
		if err := f.release(b); err != nil {
			return err
		}
	}
	return nil
}

// pgLeaseServerKillScenario starts a PostgreSQL server of its own that
// acknowledges commits before their WAL is flushed, and kills it while A
// holds a lease-mode grant (a TTL of 6s, which a quick restart leaves
// live). After the restart B asks while A goes on writing, checking its
// lock, for a second, then releases: had the server lost A's row, B would
// be granted at once, while A writes, and with a lower token.
func pgLeaseServerKillScenario(f *Fixture) error {
	r := f.Run
	srv := testserver.StartPostgres(f.T, testserver.WithPostgresSettings("synchronous_commit=off", "wal_writer_delay=10000"))
	f.Target.PG = srv
	f.Target.PGSession = pgLeaseParams(srv)
	shown, err := pgPrepare(srv)
	if err != nil {
		return err
	}
	r.Notef("server: %s", shown)
	cfg := WorkerConfig{TTL: 6 * time.Second}
	ws := f.Workers(map[string]WorkerConfig{"A": cfg, "B": cfg})
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
		r.Injected()
		bc := b.AcquireAsync(f.Key, Acq{Wait: true, Timeout: 2 * time.Minute})
		var bres AcquireResult
		written, refused, early, err := workChecked(a, f.Res, time.Second, bc, &bres)
		if err != nil {
			return err
		}
		relErr := a.Release()
		if bres, err = grantAfter(bc, early, bres, time.Minute); err != nil {
			return err
		}
		if res := b.RMW(f.Res, RMWOptions{}); res.Err != nil {
			return res.Err
		}
		when := "after A's release or expiry"
		if early {
			when = "while A worked"
		}
		r.Notef("round %d: A held token %d when the server was killed; after the restart A wrote %d increments and its own check refused %d; A's release: %s; B granted token %d %s",
			round, ta, written, refused, errKindOrOK(relErr), bres.Token, when)
		if err := f.release(b); err != nil {
			return err
		}
	}
	return nil
}
