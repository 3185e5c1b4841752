package redislock

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/redis/redact"
	"github.com/distlock/distlock/testserver"
)

// A release whose reply was lost succeeds when retried (the first one
// recorded the permit as released), and a copy of a try that arrives
// after its attempt's clean-up does nothing.
func TestPermitRetriedReleaseAndLateTry(t *testing.T) {
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	b, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sem, opts := driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute}
	l, err := b.AcquirePermit(ctx, "retried", sem, opts)
	if err != nil {
		t.Fatal(err)
	}
	p := l.(*permit)
	if n, err := p.a.runRelease(ctx, false, 0); err != nil || n != releaseReleased {
		t.Fatalf("the first release (its reply lost): %d, %v", n, err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatalf("the release retried: %v; want success", err)
	}

	a := &permitAttempt{b: b, key: "late", keys: b.permitKeys("late"), secret: redact.Bytes([]byte("LATESECRET")), sem: sem, opts: opts}
	if q, _, err := a.try(ctx, false); err != nil || q == nil {
		t.Fatalf("try: %v, %v", q, err)
	}
	a.abandon(ctx, time.Now()) // its reply was lost
	if q, _, err := a.try(ctx, false); !errors.Is(err, errTooLate) {
		t.Fatalf("a copy of the try after the clean-up: %v, %v; want errTooLate", q, err)
	}
	if st, err := b.Permits(ctx, "late"); err != nil || len(st.Holders) != 0 || st.Limit != 0 {
		t.Fatalf("Permits after the late try: %+v, %v; want nothing", st, err)
	}
}

// permitTestBackend starts a server and returns a Backend on it, with
// opts, and a client of its own for the test.
func permitTestBackend(t *testing.T, opts ...Option) (context.Context, *Backend, *redis.Client) {
	t.Helper()
	srv := testserver.StartRedis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { client.Close() })
	b, err := New(client, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	return ctx, b, admin
}

// queueWaiters puts the waiters ids in the line of key, in that order,
// their liveness an hour away.
func queueWaiters(t *testing.T, ctx context.Context, b *Backend, admin *redis.Client, key string, ids ...string) {
	t.Helper()
	now, err := admin.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	keys := b.permitKeys(key)
	for i, id := range ids {
		if err := admin.ZAdd(ctx, keys[3].(string), redis.Z{Score: float64(i + 1), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.ZAdd(ctx, keys[4].(string), redis.Z{Score: float64(now.Add(time.Hour).UnixMilli()), Member: id}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// wakeLog hears every wake channel of the default prefix. A PUBLISH to a
// waiter's channel then counts the test as a subscriber: no waiter in
// line is dropped as unheard.
type wakeLog struct {
	t      *testing.T
	admin  *redis.Client
	pubsub *redis.PubSub
}

func hearWakes(t *testing.T, ctx context.Context, admin *redis.Client) *wakeLog {
	t.Helper()
	ps := admin.PSubscribe(ctx, DefaultPrefix+"waiters:*")
	t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	return &wakeLog{t: t, admin: admin, pubsub: ps}
}

// woken returns the ids woken since the last call: it publishes a marker
// that every wake-up published before it precedes.
func (w *wakeLog) woken(ctx context.Context) []string {
	w.t.Helper()
	marker := DefaultPrefix + "waiters:marker"
	if err := w.admin.Publish(ctx, marker, "end").Err(); err != nil {
		w.t.Fatal(err)
	}
	var ids []string
	for {
		m, err := w.pubsub.ReceiveMessage(ctx)
		if err != nil {
			w.t.Fatal(err)
		}
		if m.Channel == marker {
			return ids
		}
		ids = append(ids, m.Payload)
	}
}

// A waiting try that joins the line behind a dead waiter, with every
// permit free, drops the dead one (nobody hears it) and is granted by that
// same try, not told the semaphore is full and left to its fallback timer
// (a third of its liveness, with no live permit). A waiting AcquirePermit
// in that place, its liveness an hour, returns at once.
func TestPermitJoinTryGrantedAfterDeadHead(t *testing.T) {
	ctx, b, admin := permitTestBackend(t, WithWaiterLiveness(time.Hour))
	sem, opts := driver.Semaphore{Limit: 2}, driver.AcquireOptions{TTL: time.Minute, Wait: true}
	for _, key := range []string{"join-dead", "join-dead-wait"} {
		queueWaiters(t, ctx, b, admin, key, "DEAD:x")
	}

	a := &permitAttempt{b: b, key: "join-dead", keys: b.permitKeys("join-dead"), secret: redact.Bytes([]byte(rand.Text())), sem: sem, opts: opts}
	if p, _, err := a.try(ctx, false); err != nil || p != nil {
		t.Fatalf("a newcomer's try with a waiter in line: %v, %v; want not granted", p, err)
	}
	a.giveWaiterID()
	p, retryIn, err := a.try(ctx, true)
	if err != nil || p == nil {
		t.Fatalf("the try that joins the line behind a dead waiter, 2 permits free: %v, retry in %v, %v; want granted", p, retryIn, err)
	}
	keys := b.permitKeys("join-dead")
	if ids := admin.ZRange(ctx, keys[3].(string), 0, -1).Val(); len(ids) != 0 {
		t.Fatalf("line after the grant: %q; want empty", ids)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// The same through AcquirePermit: its fallback timer is 20 minutes
	// away, so only a grant by its own try returns it in time.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	l, err := b.AcquirePermit(wctx, "join-dead-wait", sem, opts)
	if err != nil {
		t.Fatalf("a waiting AcquirePermit behind a dead waiter, 2 permits free: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A script that finds permits lapsed wakes the waiter a free permit now
// awaits, whatever it was run for: Permits, a refused TryAcquire, a try
// that names another limit.
func TestPermitLapseFoundWakes(t *testing.T) {
	ctx, b, admin := permitTestBackend(t)
	wakes := hearWakes(t, ctx, admin)
	for _, c := range []struct {
		name string
		run  func(key string) error
	}{
		{"Permits", func(key string) error {
			_, err := b.Permits(ctx, key)
			return err
		}},
		{"TryAcquire", func(key string) error {
			_, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 1}, driver.AcquireOptions{TTL: time.Minute})
			if !errors.Is(err, driver.ErrNotAcquired) {
				return err
			}
			return nil
		}},
		{"another limit", func(key string) error {
			_, err := b.AcquirePermit(ctx, key, driver.Semaphore{Limit: 2}, driver.AcquireOptions{TTL: time.Minute})
			if le := (*driver.LimitError)(nil); !errors.As(err, &le) {
				return err
			}
			return nil
		}},
	} {
		key := "lapse-found-" + c.name
		keys := b.permitKeys(key)
		queueWaiters(t, ctx, b, admin, key, "W:"+c.name)
		if err := admin.Set(ctx, keys[2].(string), 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		// A permit whose expiry passed, which nobody gave back.
		if err := admin.ZAdd(ctx, keys[0].(string), redis.Z{Score: 1, Member: "lapsed"}).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.HSet(ctx, keys[1].(string), "lapsed", "1|-1|0|gone").Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.run(key); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ids := wakes.woken(ctx); !slices.Equal(ids, []string{"W:" + c.name}) {
			t.Fatalf("%s found a permit lapsed, one waiter in line: woke %q; want that waiter", c.name, ids)
		}
	}
}

// A grant wakes nobody: it takes a permit and leaves the line, so the
// waiters a free permit awaits are those it awaited before, woken then.
// Here the first of two waiters is granted one of three free permits; the
// second was free already, and is not woken again.
func TestPermitGrantWakesNobody(t *testing.T) {
	ctx, b, admin := permitTestBackend(t)
	wakes := hearWakes(t, ctx, admin)
	key := "grant-wakes-nobody"
	queueWaiters(t, ctx, b, admin, key, "T:first", "T:second")
	a := &permitAttempt{b: b, key: key, keys: b.permitKeys(key), secret: redact.Bytes([]byte(rand.Text())),
		sem: driver.Semaphore{Limit: 3}, opts: driver.AcquireOptions{TTL: time.Minute, Wait: true}, waiterID: "T:first"}
	p, _, err := a.try(ctx, true)
	if err != nil || p == nil {
		t.Fatalf("the first waiter's try, 3 permits free: %v, %v; want granted", p, err)
	}
	if ids := wakes.woken(ctx); len(ids) != 0 {
		t.Fatalf("a grant with 2 permits left free woke %q; want nobody", ids)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// pipelineCounter counts the pipelines that carry a script call.
type pipelineCounter struct {
	mu sync.Mutex
	n  int
}

func (c *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (c *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool { return cmd.Name() == "evalsha" || cmd.Name() == "eval" }) {
			c.mu.Lock()
			c.n++
			c.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

func (c *pipelineCounter) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = 0
	return n
}

// RefreshAll refreshes locks and permits in one pipeline, and in one more
// (with EVAL) on a server that lost the scripts.
func TestRefreshAllPermitsOnePipeline(t *testing.T) {
	ctx, b, admin := permitTestBackend(t)
	count := &pipelineCounter{}
	b.client.AddHook(count)
	opts := driver.AcquireOptions{TTL: 10 * time.Second}
	lock, err := b.Acquire(ctx, "pipeline-lock", opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.AcquirePermit(ctx, "pipeline-permit", driver.Semaphore{Limit: 2}, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The first call loads the scripts (EVALSHA, then EVAL).
	if res := b.RefreshAll(ctx, []driver.Lease{p, lock}, time.Minute); res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("RefreshAll: %+v", res)
	}
	for _, flush := range []bool{false, true} {
		if flush {
			if err := admin.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		count.take()
		res := b.RefreshAll(ctx, []driver.Lease{p, lock}, time.Minute)
		for i, r := range res {
			if r.Err != nil || r.Validity.TTL != time.Minute {
				t.Fatalf("scripts flushed %v: RefreshAll lease %d: %+v", flush, i, r)
			}
		}
		want := 1
		if flush {
			want = 2
		}
		if n := count.take(); n != want {
			t.Fatalf("scripts flushed %v: RefreshAll of a lock and a permit sent %d pipelines; want %d", flush, n, want)
		}
	}
	for _, l := range []driver.Lease{lock, p} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
