package pglock_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/pglock"
)

// statementCounter counts the statements a pool sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countedPool is a pool of connections to dsn whose statements are
// counted.
func countedPool(t *testing.T, dsn string) (*pgxpool.Pool, *statementCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn + "&pool_max_conns=8")
	if err != nil {
		t.Fatal(err)
	}
	sc := &statementCounter{}
	cfg.ConnConfig.Tracer = sc
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, sc
}

// countedLeaseBackend is newLeaseBackend with the statements of its pool
// counted (the LISTEN session's are not).
func countedLeaseBackend(t *testing.T, dsn string, opts ...pglock.Option) (*pglock.Backend, *statementCounter) {
	t.Helper()
	pool, sc := countedPool(t, dsn)
	b, err := pglock.New(pool, append([]pglock.Option{pglock.WithMode(pglock.LeaseMode)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, sc
}

// queued counts the live waiters of key in the lease queue.
func queued(t testing.TB, admin *pgxpool.Pool, key string) int {
	return count(t, admin, queuedSQL, key)
}

// Waiters in separate processes are granted a released key in the order
// they came, and a release makes only the next waiter try: the others
// send nothing (they poll once an hour). Before the queue, a release woke
// every waiter, each of which tried, and the first try won.
func TestLeaseQueueHandsOffInOrder(t *testing.T) {
	ctx, key := testCtx(t), "lease/queue/"+t.Name()
	admin := newPool(t, server)
	holder := newLeaseBackend(t, server.DSN)
	const n = 4
	type waiter struct {
		b       *pglock.Backend
		sc      *statementCounter
		granted chan driver.Lease
	}
	ws := make([]*waiter, n)
	held := acquire(t, holder, ctx, key, driver.AcquireOptions{TTL: 2 * time.Minute})
	for i := range ws {
		b, sc := countedLeaseBackend(t, server.DSN, pglock.WithListen(server.DSN), pglock.WithPollInterval(time.Hour))
		w := &waiter{b: b, sc: sc, granted: make(chan driver.Lease, 1)}
		ws[i] = w
		go func() {
			l, err := w.b.Acquire(ctx, key, driver.AcquireOptions{TTL: 2 * time.Minute, Wait: true})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				close(w.granted)
				return
			}
			w.granted <- l
		}()
		// Queued, and pausing with its LISTEN live: a waiter whose listener
		// came up after its try tries once more.
		eventually(t, 10*time.Second, fmt.Sprintf("waiter %d is queued", i), func() bool {
			return queued(t, admin, key) == i+1 && w.b.LivePauses() > 0
		})
	}
	release := held.Release
	for i, w := range ws {
		before := make([]int64, n)
		for j, o := range ws {
			before[j] = o.sc.n.Load()
		}
		if err := release(ctx); err != nil {
			t.Fatalf("release before waiter %d: %v", i, err)
		}
		var l driver.Lease
		select {
		case l = <-w.granted:
		case <-ctx.Done():
			t.Fatalf("waiter %d, next in line, was not granted the key", i)
		}
		if l == nil {
			t.FailNow()
		}
		if got := w.sc.n.Load() - before[i]; got != 1 {
			t.Errorf("hand-off to waiter %d: it sent %d statements, want 1 (its try)", i, got)
		}
		for j, o := range ws {
			want := int64(0)
			if j == i-1 {
				want = 1 // its release
			}
			if j != i && o.sc.n.Load()-before[j] != want {
				t.Errorf("hand-off to waiter %d: waiter %d sent %d statements, want %d (woken by another's release)", i, j, o.sc.n.Load()-before[j], want)
			}
		}
		release = l.Release
	}
	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	if q := count(t, admin, `SELECT count(*) FROM distlock_lease_waiter WHERE key = $1`, key); q != 0 {
		t.Errorf("%d waiter rows left after every waiter was granted", q)
	}
}

// A waiter that gives up leaves the queue, and if the key is free, the
// next waiter is told: here the key is freed by hand, which notifies
// nobody, and the waiters poll once an hour, so only the leave can wake
// the second waiter.
func TestLeaseQueueLeaverStepsAside(t *testing.T) {
	ctx, key := testCtx(t), "lease/queue-leave/"+t.Name()
	admin := newPool(t, server)
	holder := newLeaseBackend(t, server.DSN)
	first := newLeaseBackend(t, server.DSN, pglock.WithListen(server.DSN), pglock.WithPollInterval(time.Hour))
	second := newLeaseBackend(t, server.DSN, pglock.WithListen(server.DSN), pglock.WithPollInterval(time.Hour))
	acquire(t, holder, ctx, key, driver.AcquireOptions{TTL: 2 * time.Minute})

	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	firstDone := make(chan error, 1)
	go func() {
		_, err := first.Acquire(fctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		firstDone <- err
	}()
	eventually(t, 10*time.Second, "the first waiter is queued", func() bool {
		return queued(t, admin, key) == 1 && first.LivePauses() > 0
	})
	got := make(chan error, 1)
	go func() {
		l, err := second.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "the second waiter is queued", func() bool {
		return queued(t, admin, key) == 2 && second.LivePauses() > 0
	})
	if _, err := admin.Exec(ctx, `UPDATE distlock_lease SET grant_id = NULL, expires = '-infinity' WHERE key = $1`, key); err != nil {
		t.Fatal(err)
	}
	fcancel()
	if err := <-firstDone; err == nil {
		t.Fatal("the cancelled waiter was granted the key")
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute): // it polls once an hour: only the leave can wake it
		t.Fatal("the second waiter was not granted the key after the first left the queue")
	}
}

// waiterHelperEnv names the environment variables of the waiter process
// TestLeaseQueueSkipsKilledWaiter starts (this test binary again).
const (
	waiterHelperDSN = "PGLOCK_TEST_WAITER_DSN"
	waiterHelperKey = "PGLOCK_TEST_WAITER_KEY"
)

// runWaiterHelper is the waiter process: it waits for the key until it is
// killed. It runs before TestMain starts a server.
func runWaiterHelper() {
	dsn, key := os.Getenv(waiterHelperDSN), os.Getenv(waiterHelperKey)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	b, err := pglock.New(pool, pglock.WithMode(pglock.LeaseMode), pglock.WithListen(dsn), pglock.WithPollInterval(20*time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	_, err = b.Acquire(context.Background(), key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
	fmt.Fprintln(os.Stderr, "waiter helper: acquire returned:", err)
	os.Exit(3)
}

// A waiter whose process is killed (SIGKILL) while it is the head of the
// queue delays the next waiter only until its row expires: three of its
// mean pauses (with LISTEN, 3 × 10 × its poll interval of 20ms = 600ms)
// after its last try.
func TestLeaseQueueSkipsKilledWaiter(t *testing.T) {
	ctx, key := testCtx(t), "lease/queue-killed/"+t.Name()
	admin := newPool(t, server)
	holder := newLeaseBackend(t, server.DSN)
	live := newLeaseBackend(t, server.DSN, pglock.WithListen(server.DSN), pglock.WithPollInterval(20*time.Millisecond))
	held := acquire(t, holder, ctx, key, driver.AcquireOptions{TTL: 2 * time.Minute})

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), waiterHelperDSN+"="+server.DSN, waiterHelperKey+"="+key)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	eventually(t, 30*time.Second, "the waiter process is queued", func() bool { return queued(t, admin, key) == 1 })
	got := make(chan error, 1)
	go func() {
		l, err := live.Acquire(ctx, key, driver.AcquireOptions{TTL: time.Minute, Wait: true})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	eventually(t, 10*time.Second, "the live waiter is queued", func() bool { return queued(t, admin, key) == 2 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the live waiter was granted the key %v after the release (the killed waiter's row lives 600ms)", time.Since(released).Round(time.Millisecond))
	case <-ctx.Done():
		t.Fatal("the live waiter was not granted the key after the killed waiter's row expired")
	}
	if q := count(t, admin, `SELECT count(*) FROM distlock_lease_waiter WHERE key = $1`, key); q != 0 {
		t.Errorf("%d waiter rows left: the grant did not sweep the killed waiter's", q)
	}
}
