package testserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Postgres is a PostgreSQL server started by StartPostgres.
type Postgres struct {
	// DSN is "postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable";
	// authentication is trust.
	DSN string
	// Port is the TCP port on 127.0.0.1.
	Port int
	// Dir holds the data directory "data" and the log "postgres.log".
	Dir string
	// SocketDir is the directory of the server's Unix socket.
	SocketDir string
	// Process is the postmaster: Stop (SIGINT, the fast shutdown), Kill
	// (the postmaster and all its backends; Restart then performs crash
	// recovery), Pause, Resume, Restart (same port and data directory; it
	// waits until the server accepts sessions).
	*Process
	// Clock is the server's wall clock, set when it was started
	// WithPostgresMovableClock.
	Clock *MovableClock

	runAs *runAsUser // nil: the current user
}

// PostgresBin returns the path of a PostgreSQL program (postgres, initdb,
// pg_isready, psql, ...): the one in the highest-versioned
// /usr/lib/postgresql/*/bin, else the one in PATH. It skips or fails the test
// (see Require) if there is none.
func PostgresBin(t testing.TB, name string) string {
	t.Helper()
	if p := findPostgresBin(name); p != "" {
		return p
	}
	Missing(t, "PostgreSQL program "+name)
	return ""
}

func findPostgresBin(name string) string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, d := range dirs {
		if p, err := lookBin(filepath.Join(d, name)); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

// pgVersion returns the version in /usr/lib/postgresql/VERSION/bin.
func pgVersion(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// pgEnv is the environment of the PostgreSQL programs: the caller's
// environment without PG* variables, with the C locale.
func pgEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LANG=C", "LC_ALL=C", "HOME="+home)
}

// PostgresOption configures StartPostgres.
type PostgresOption func(*postgresConfig)

type postgresConfig struct {
	args         []string // after the defaults
	movableClock bool
}

// WithPostgresSettings passes settings ("name=value", as postgres -c takes
// them) after the defaults, so that they override them: "fsync=on" makes
// committed transactions survive a crash of the machine, not only of the
// server.
func WithPostgresSettings(settings ...string) PostgresOption {
	return func(c *postgresConfig) {
		for _, s := range settings {
			c.args = append(c.args, "-c", s)
		}
	}
}

// WithPostgresMovableClock starts the server with a wall clock that the
// test moves with Postgres.Clock: the shim of WithRedisMovableClock,
// preloaded into the postmaster and so into every backend it forks.
// now(), clock_timestamp() and every other reading of the server's wall
// clock move with it (PostgreSQL reads it with gettimeofday and
// clock_gettime(CLOCK_REALTIME)), and so do its timeouts
// (statement_timeout, lock_timeout, idle_session_timeout and the others
// are timed by that clock: a jump makes them fire early or late). The
// offset stays across Restart. Linux only:
// elsewhere the test is skipped.
func WithPostgresMovableClock() PostgresOption {
	return func(c *postgresConfig) { c.movableClock = true }
}

// StartPostgres initialises a cluster in a temporary directory (initdb with
// trust authentication and superuser postgres), starts postgres on a free
// port of 127.0.0.1 with fsync off (unless opts say otherwise), and waits
// until it accepts connections. When the test runs as root, initdb and
// postgres run as the "postgres" user. The server is stopped when the test
// ends.
func StartPostgres(t testing.TB, opts ...PostgresOption) *Postgres {
	t.Helper()
	postgres := PostgresBin(t, "postgres")
	initdb := PostgresBin(t, "initdb")
	runAs, err := lookupRunAs("postgres")
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}

	var cfg postgresConfig
	for _, o := range opts {
		o(&cfg)
	}
	p := &Postgres{Dir: t.TempDir(), runAs: runAs}
	// The socket path must stay below ~107 bytes, so it gets a short
	// directory of its own.
	sock, err := os.MkdirTemp("", "pgsock")
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	p.SocketDir = sock
	data := filepath.Join(p.Dir, "data")
	for _, d := range []string{p.Dir, sock} {
		if err := giveTo(runAs, d); err != nil {
			t.Fatalf("testserver: prepare %s for user postgres: %v", d, err)
		}
	}

	env := pgEnv(p.Dir)
	if cfg.movableClock {
		// The offset file is in p.Dir, which the server's user owns.
		var vars []string
		p.Clock, vars = movableClock(t, p.Dir, runAs)
		env = append(env, vars...)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, initdb,
		"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Dir = p.Dir
	cmd.Env = pgEnv(p.Dir)
	cmd.SysProcAttr = sysProcAttr(runAs)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testserver: initdb: %v\n%s", err, out)
	}

	startWithRetry(t, "postgres", func() ([]*Process, error) {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p.Port = port
		p.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		args := []string{
			"-D", data,
			"-p", strconv.Itoa(port),
			"-k", sock,
			"-c", "listen_addresses=127.0.0.1",
			"-c", "fsync=off",
			"-c", "full_page_writes=off",
			"-c", "max_connections=200",
		}
		args = append(args, cfg.args...)
		p.Process = &Process{
			name:    "postgres 127.0.0.1:" + strconv.Itoa(port),
			path:    postgres,
			args:    args,
			dir:     p.Dir,
			env:     env,
			logPath: filepath.Join(p.Dir, "postgres.log"),
			// SIGINT is the "fast" shutdown; SIGTERM would wait for clients.
			stopSig:      syscall.SIGINT,
			runAs:        runAs,
			ready:        p.probe,
			readyTimeout: startTimeout,
		}
		procs := []*Process{p.Process}
		if err := p.launch(t); err != nil {
			return procs, err
		}
		return procs, awaitAll(time.Now().Add(startTimeout), procs)
	})
	return p
}

func (p *Postgres) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)) }

// probe is the readiness probe: a session is accepted (the startup
// handshake reaches ReadyForQuery), and pg_isready, where installed, agrees.
func (p *Postgres) probe() error {
	if err := pgHandshake(p.addr()); err != nil {
		return err
	}
	isready := findPostgresBin("pg_isready")
	if isready == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, isready, "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", "postgres", "-d", "postgres", "-t", "2")
	cmd.Env = pgEnv(p.Dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_isready: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// pgHandshake connects to addr as user postgres, database postgres, and
// succeeds once the server sends ReadyForQuery (trust authentication).
func pgHandshake(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		return err
	}
	var body bytes.Buffer
	binary.Write(&body, binary.BigEndian, int32(196608)) // protocol 3.0
	for _, s := range []string{"user", "postgres", "database", "postgres", ""} {
		body.WriteString(s)
		body.WriteByte(0)
	}
	msg := binary.BigEndian.AppendUint32(nil, uint32(body.Len()+4))
	if _, err := c.Write(append(msg, body.Bytes()...)); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	for {
		typ, err := br.ReadByte()
		if err != nil {
			return err
		}
		var n uint32
		if err := binary.Read(br, binary.BigEndian, &n); err != nil {
			return err
		}
		if n < 4 || n > 1<<20 {
			return fmt.Errorf("postgres: bad message length %d", n)
		}
		payload := make([]byte, n-4)
		if _, err := io.ReadFull(br, payload); err != nil {
			return err
		}
		switch typ {
		case 'Z': // ReadyForQuery
			_, _ = c.Write([]byte{'X', 0, 0, 0, 4}) // Terminate
			return nil
		case 'E':
			return fmt.Errorf("postgres: %s", bytes.ReplaceAll(bytes.TrimRight(payload, "\x00"), []byte{0}, []byte{' '}))
		case 'R':
			if len(payload) >= 4 && binary.BigEndian.Uint32(payload) != 0 {
				return errors.New("postgres: server asks for a password; trust authentication expected")
			}
		}
	}
}
