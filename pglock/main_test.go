package pglock_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
	"github.com/distlock/distlock/testserver"
)

// server is the PostgreSQL server the package's tests and examples share,
// started by TestMain. Tests that restart a server start their own.
var server *testserver.Postgres

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Getenv(waiterHelperDSN) != "" {
		runWaiterHelper() // never returns
	}
	tb := &mainTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		server = testserver.StartPostgres(tb)
	}()
	<-done
	switch {
	case tb.skipped != "" || tb.failed != "":
		tb.cleanup()
	}
	switch {
	case tb.skipped != "":
		// Examples cannot be skipped: without a server, the package's
		// tests do not run at all (testserver fails under CI=true).
		fmt.Println("pglock: no PostgreSQL server:", tb.skipped)
		return 0
	case tb.failed != "":
		fmt.Fprintln(os.Stderr, "pglock: start PostgreSQL:", tb.failed)
		return 1
	}
	os.Setenv("DATABASE_URL", server.DSN) // for the examples
	code := m.Run()
	tb.cleanup() // stops the server, and its goroutines with it
	if code == 0 {
		// pgx's own goroutines of a cancelled query, bounded by its
		// deadlines (see pgxCancelling), may outlast the last test that
		// cancelled one through PgBouncer.
		if err := goleak.Find(pgxCancelling...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// mainTB is the testing.TB testserver.StartPostgres is given in TestMain,
// where there is no test: it keeps the clean-ups for the end of the run and
// records a failure or a skip, which end the goroutine that called it as
// they end a test. Methods StartPostgres does not use are left to the nil
// embedded interface.
type mainTB struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
	failed   string
	skipped  string
}

func (m *mainTB) Helper()                   {}
func (m *mainTB) Logf(string, ...any)       {}
func (m *mainTB) Cleanup(f func())          { m.mu.Lock(); m.cleanups = append(m.cleanups, f); m.mu.Unlock() }
func (m *mainTB) Fatal(args ...any)         { m.failed = fmt.Sprint(args...); runtime.Goexit() }
func (m *mainTB) Fatalf(f string, a ...any) { m.failed = fmt.Sprintf(f, a...); runtime.Goexit() }
func (m *mainTB) Skipf(f string, a ...any)  { m.skipped = fmt.Sprintf(f, a...); runtime.Goexit() }
func (m *mainTB) TempDir() string {
	d, err := os.MkdirTemp("", "pglock-test")
	if err != nil {
		m.Fatalf("%v", err)
	}
	m.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func (m *mainTB) cleanup() {
	for i := len(m.cleanups) - 1; i >= 0; i-- {
		m.cleanups[i]()
	}
}

// newPool returns a pool of connections to srv, closed when the test ends.
func newPool(t testing.TB, srv *testserver.Postgres, settings ...string) *pgxpool.Pool {
	t.Helper()
	dsn := srv.DSN
	for _, s := range settings {
		dsn += "&" + s
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgxpool.New: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newBackend returns a Backend over a pool of its own (one more process),
// both closed when the test ends.
func newBackend(t testing.TB, srv *testserver.Postgres, opts ...pglock.Option) *pglock.Backend {
	t.Helper()
	// The suite holds dozens of locks at once, each on a connection.
	b, err := pglock.New(newPool(t, srv, "pool_max_conns=50"), opts...)
	if err != nil {
		t.Fatalf("pglock.New: %v", err)
	}
	t.Cleanup(func() { b.Close() }) // before the pool's Close, registered earlier
	return b
}

// newClient returns a distlock Client over b, closed when the test ends.
func newClient(t testing.TB, b driver.Backend, opts ...distlock.Option) *distlock.Client {
	t.Helper()
	c, err := distlock.New(b, opts...)
	if err != nil {
		t.Fatalf("distlock.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// testCtx returns a context bounding a test.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
