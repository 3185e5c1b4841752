package testserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A PgBouncerOption configures StartPgBouncer.
type PgBouncerOption func(*pgBouncerConfig)

type pgBouncerConfig struct{ poolMode string }

// WithPgBouncerSessionPool makes the bouncer pool in session mode (a
// server session for each client connection, for its whole life) instead
// of transaction mode, the default.
func WithPgBouncerSessionPool() PgBouncerOption {
	return func(c *pgBouncerConfig) { c.poolMode = "session" }
}

// PgBouncer is a PgBouncer started by StartPgBouncer in front of a Postgres.
type PgBouncer struct {
	// DSN is "postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable",
	// the Postgres's DSN through the bouncer; authentication is trust.
	DSN string
	// Port is the TCP port on 127.0.0.1.
	Port int
	// Dir holds pgbouncer.ini, userlist.txt and the log "pgbouncer.log".
	Dir string
	// Postgres is the server the bouncer forwards to.
	Postgres *Postgres

	poolMode string
	// Process is the bouncer: Stop (SIGTERM, its immediate shutdown), Kill,
	// Pause, Resume, Restart (same port and configuration; it waits until a
	// session through the bouncer reaches the server).
	*Process
}

// pgbouncerPaths are where a PgBouncer is looked for when it is not in PATH:
// Debian installs it in /usr/sbin, which a non-root PATH often lacks.
var pgbouncerPaths = []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"}

// StartPgBouncer starts a PgBouncer on a free port of 127.0.0.1 in front of
// pg, in transaction pooling mode (a server connection is held by a client
// only for the length of a transaction, so session state such as advisory
// locks taken outside a transaction or SET does not follow the client), with
// trust authentication for the user postgres, and waits until a session
// through it reaches pg. The admin console is the database "pgbouncer" (SHOW
// POOLS, SHOW CONFIG, ...). When the test runs as root, PgBouncer runs as the
// "postgres" user, as it refuses to run as root. It is stopped when the test
// ends.
func StartPgBouncer(t testing.TB, pg *Postgres, opts ...PgBouncerOption) *PgBouncer {
	t.Helper()
	cfg := pgBouncerConfig{poolMode: "transaction"}
	for _, o := range opts {
		o(&cfg)
	}
	bin := findPgBouncer()
	if bin == "" {
		Missing(t, "pgbouncer")
	}
	b := &PgBouncer{Dir: t.TempDir(), Postgres: pg, poolMode: cfg.poolMode}
	if err := giveTo(pg.runAs, b.Dir); err != nil {
		t.Fatalf("testserver: prepare %s for user postgres: %v", b.Dir, err)
	}
	users := filepath.Join(b.Dir, "userlist.txt")
	if err := os.WriteFile(users, []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	startWithRetry(t, "pgbouncer", func() ([]*Process, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		b.Port = port
		b.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		conf := filepath.Join(b.Dir, "pgbouncer.ini")
		if err := os.WriteFile(conf, []byte(b.config(users)), 0o644); err != nil {
			return nil, err
		}
		b.Process = &Process{
			name:         "pgbouncer 127.0.0.1:" + strconv.Itoa(port),
			path:         bin,
			args:         []string{conf},
			dir:          b.Dir,
			env:          pgEnv(b.Dir),
			logPath:      filepath.Join(b.Dir, "pgbouncer.log"),
			stopSig:      syscall.SIGTERM,
			runAs:        pg.runAs,
			ready:        func() error { return pgHandshake(b.addr()) },
			readyTimeout: startTimeout,
		}
		procs := []*Process{b.Process}
		if err := b.launch(t); err != nil {
			return procs, err
		}
		return procs, awaitAll(time.Now().Add(startTimeout), procs)
	})
	return b
}

func findPgBouncer() string {
	if p, err := lookBin("pgbouncer"); err == nil {
		return p
	}
	for _, p := range pgbouncerPaths {
		if p, err := lookBin(p); err == nil {
			return p
		}
	}
	return ""
}

func (b *PgBouncer) addr() string { return "127.0.0.1:" + strconv.Itoa(b.Port) }

// config is pgbouncer.ini. The log goes to stderr (the Process's log file),
// there is no Unix socket and no pid file, and every database name is
// forwarded to the server.
func (b *PgBouncer) config(users string) string {
	lines := []string{
		"[databases]",
		fmt.Sprintf("* = host=127.0.0.1 port=%d", b.Postgres.Port),
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(b.Port),
		"unix_socket_dir =",
		"pidfile =",
		"logfile =",
		"auth_type = trust",
		"auth_file = " + users,
		"admin_users = postgres",
		"pool_mode = " + b.poolMode,
		"max_client_conn = 500",
		"default_pool_size = 20",
		// Drivers such as lib/pq send it; PgBouncer would refuse the
		// session.
		"ignore_startup_parameters = extra_float_digits",
	}
	return strings.Join(lines, "\n") + "\n"
}
