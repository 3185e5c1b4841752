package bench

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/testserver"
)

// Postgres returns the DSN of a PostgreSQL server, starting it if needed
// (as the postgres user when the test runs as root).
func (e *Env) Postgres() string {
	e.tb.Helper()
	if e.pg == nil {
		e.pg = testserver.StartPostgres(e.tb)
	}
	return e.pg.DSN
}

// PgBouncer returns the DSN of a PgBouncer in transaction pooling mode in
// front of the PostgreSQL server, starting both if needed. A client's
// statements reach the server on whichever of the bouncer's server
// connections is free (at most 20): session state, such as a session
// advisory lock, a LISTEN or a named prepared statement, does not follow
// the client.
func (e *Env) PgBouncer() string {
	e.tb.Helper()
	if e.pgb == nil {
		e.Postgres()
		e.pgb = testserver.StartPgBouncer(e.tb, e.pg)
	}
	return e.pgb.DSN
}

// PostgresPool returns a pgx pool of the server with at most maxConns
// connections, whose statements are counted. The caller closes it.
func (e *Env) PostgresPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	return e.pgPool(ctx, e.Postgres(), maxConns)
}

// PgBouncerPool is PostgresPool through the PgBouncer: its connections are
// the bouncer's clients.
func (e *Env) PgBouncerPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	return e.pgPool(ctx, e.PgBouncer(), maxConns)
}

func (e *Env) pgPool(ctx context.Context, dsn string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	if e.via != nil {
		a, err := e.via(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
		if err != nil {
			return nil, err
		}
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(p)
	}
	cfg.ConnConfig.Tracer = pgCounter{n: &e.pgSent, by: &e.pgSentBy}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// pgCounter is a pgx tracer that counts the statements a pool sends
// (Exec, Query, QueryRow), by the name of the function they call.
// Statements pgx sends by itself (the Prepare of a statement's first use
// on a connection, the pool's liveness pings) are not counted: a
// connection pays for them once, or only after a second of idleness.
type pgCounter struct {
	n  *atomic.Int64
	by *sync.Map
}

func (c pgCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	name := statementName(d.SQL)
	v, ok := c.by.Load(name)
	if !ok {
		v, _ = c.by.LoadOrStore(name, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
	return ctx
}

func (pgCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// statementName names a statement by the function it calls:
// "SELECT pg_advisory_lock(hashtextextended($1, 0))" is pg_advisory_lock,
// "CALL distlock_release($1, $2)" is distlock_release, "SELECT granted,
// retry_ms FROM distlock_lease_acquire($1, $2, $3, $4)" is
// distlock_lease_acquire, and a statement with a WITH clause is named by
// its main statement with " (after WITH)" added, an UPDATE whose
// RETURNING calls a function by that function with " (after UPDATE)"
// added; others by their first words. A function's schema is dropped. The name is on one line: it goes
// into a table row.
func statementName(sql string) string {
	s := strings.Join(strings.Fields(sql), " ")
	if rest, ok := strings.CutPrefix(s, "WITH "); ok {
		if i := strings.LastIndex(rest, ") SELECT "); i >= 0 {
			return statementName(rest[i+2:]) + " (after WITH)"
		}
	}
	if strings.HasPrefix(s, "UPDATE ") {
		if i := strings.LastIndex(s, " RETURNING "); i >= 0 {
			if name, _, ok := strings.Cut(s[i+len(" RETURNING "):], "("); ok && name != "" && !strings.Contains(name, " ") {
				return unqualified(name) + " (after UPDATE)"
			}
		}
	}
	for _, verb := range []string{"SELECT ", "CALL "} {
		if rest, ok := strings.CutPrefix(s, verb); ok {
			if name, _, ok := strings.Cut(rest, "("); ok && !strings.Contains(name, " ") {
				return unqualified(name)
			}
			// A set-returning function: SELECT columns FROM f(...).
			if _, from, ok := strings.Cut(rest, " FROM "); ok {
				if name, _, ok := strings.Cut(from, "("); ok && name != "" && !strings.Contains(name, " ") {
					return unqualified(name)
				}
			}
		}
	}
	if len(s) > 24 {
		s = s[:24]
	}
	return s
}

// unqualified drops a function name's schema ("public".distlock_acquire,
// pg_catalog.pg_advisory_unlock), so that rows calling one function by
// either spelling count under one name.
func unqualified(name string) string {
	if i := strings.LastIndex(name, "."); i >= 0 {
		return name[i+1:]
	}
	return name
}

// PostgresSnapshot reads the count of statements sent by counted pools.
// PostgreSQL's own statistics (pg_stat_database) are flushed by each
// session up to a second late, so the server side is not read: Ops stays 0.
func (e *Env) PostgresSnapshot(context.Context) (Snapshot, error) {
	s := Snapshot{Requests: e.pgSent.Load(), ByName: map[string]int64{}, RequestsByName: map[string]int64{}}
	e.pgSentBy.Range(func(k, v any) bool {
		s.RequestsByName[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return s, nil
}

// pgVersion adds the PostgreSQL server's version, followed by the
// PgBouncer's if one ran ("15.8, PgBouncer 1.18.0": the report lists the
// servers as "PostgreSQL " and this).
func (e *Env) pgVersion(ctx context.Context, out map[string]string) {
	if e.pg == nil {
		return
	}
	conn, err := pgx.Connect(ctx, e.pg.DSN)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	var v string
	if conn.QueryRow(ctx, "SHOW server_version").Scan(&v) == nil {
		v, _, _ = strings.Cut(v, " ") // "15.8 (Debian 15.8-0+deb12u1)"
		if e.pgb != nil {
			if bv := pgBouncerVersion(ctx, e.pgb); bv != "" {
				v += ", PgBouncer " + bv
			}
		}
		out["PostgreSQL"] = v
	}
}

// pgBouncerVersion asks the bouncer's admin console, which speaks only the
// simple query protocol, for its version ("1.18.0"); "" if it cannot.
func pgBouncerVersion(ctx context.Context, b *testserver.PgBouncer) string {
	cfg, err := pgx.ParseConfig(strings.Replace(b.DSN, "/postgres?", "/pgbouncer?", 1))
	if err != nil {
		return ""
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return ""
	}
	defer conn.Close(ctx)
	var v string
	if conn.QueryRow(ctx, "SHOW VERSION").Scan(&v) != nil {
		return ""
	}
	return strings.TrimPrefix(v, "PgBouncer ")
}
